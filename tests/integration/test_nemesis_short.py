"""A short run of the fault-injection harness (bookie.testing.nemesis) in the default suite.

Each test runs ``python -m bookie.testing.nemesis`` as a process of its own (network
namespaces are entered by that process alone), with a fixed seed so that CI replays the same
fault schedule; ``BOOKIE_NEMESIS_SEED`` picks another.  The seeds were picked for the mix of
faults their round draws (``--print-schedule 1`` lists it): seed 30 on the embedded store
with ``--lifecycle --disk`` loses a bookie for good (an empty one takes its place under a new
id; autorecovery and the operator's ``recover`` heal around it), moves a bookie to another
port under its bookieId, fills one of a bookie's two journal disks, sends a squatter's
wrong-key and squatting traffic and takes the log over (where tmpfs cannot be mounted, seed 1
without ``--disk``: the same but the journal disk); its check reads every copy of every acknowledged
entry from each bookie and, after a full audit, wants every entry on Qw bookies.  Seed 9 on
ZooKeeper (opt-in, ``-m soak``) partitions the network twice, recovers a ledger behind a
partition, pauses ZooKeeper, restarts a bookie, pauses a writer and drops packets.  On a violation the test fails with the
harness's summary, which names the seed and the command that replays it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

SEED = os.environ.get("BOOKIE_NEMESIS_SEED")


def run_nemesis(seed: int, *args: str, timeout_s: float) -> str:
    cmd = [sys.executable, "-m", "bookie.testing.nemesis", "--seed", SEED or str(seed), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    out = done.stdout + done.stderr
    print(out[-4000:])
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{out[-12000:]}"
    return out


def can_mount() -> bool:
    from bookie.testing.nemesis.disk import available
    return available() is None


def can_netns() -> bool:
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("ip", "nft", "tc"))


@pytest.fixture
def netns_tools():
    """Root with ip, nft and tc, which tests/setup.sh installs: missing, these fail, not skip."""
    assert can_netns(), "network faults need root with ip, nft and tc: run tests/setup.sh"


def figures(out: str) -> dict:
    """The JSON line that ends the harness's summary on stdout (``out`` is stdout then stderr,
    where an in-process client's late warning, "ensemble changed", may come after it)."""
    import json
    return json.loads([line for line in out.strip().splitlines() if line.startswith("{")][-1])


def test_acknowledged_entries_survive_lifecycle_faults_and_full_disks_on_the_embedded_store():
    seed, extra = (30, ["--disk"]) if can_mount() else (1, [])
    out = run_nemesis(seed, "--time", "8", "--round", "8", "--bookies", "4", "--writers", "2",
                      "--metadata", "lmdb", "--lifecycle", *extra, timeout_s=300)
    result = figures(out)
    assert result["violations"] == 0 and result["reader_violations"] == 0, out[-6000:]
    assert result["lost"] == 0 and result["ok"]
    # One round: the lifecycle kinds owed first (the newest mechanisms: the rename, deferred
    # sync's lost bookie, tamper; then a bookie lost for good) are each scheduled, injected or
    # skipped with its reason when its target was down (another fault had it); the older kinds
    # (squat, readdress, journal_full, ...) come in later rounds: the soak's and the 240 s run's.
    from bookie.testing.nemesis.schedule import OWED_ORDER, OWED_PER_ROUND
    for kind in OWED_ORDER[:OWED_PER_ROUND]:
        assert kind in result["faults"] or kind in result["skipped"], (kind, result["faults"])
    assert sum(result["faults"].get(k, 0) for k in OWED_ORDER) >= 2, result["faults"]
    assert result["replica_checks"] >= 2 * result["entries_checked"] > 0


@pytest.mark.soak  # opt-in (-m soak): a minute and more; the default suite's nemesis run is
# the lifecycle one above, its partitions are checked by the partition test below, and
# ZooKeeper outages by test_bookie_faults.py; the soak's zookeeper run has network faults too
@pytest.mark.usefixtures("netns_tools")
def test_acknowledged_entries_survive_zookeeper_and_network_faults():
    out = run_nemesis(9, "--time", "10", "--round", "10", "--bookies", "4", "--metadata", "zk",
                      "--network", timeout_s=300)
    assert "violations: 0" in out
    assert "lost: 0" in out


def _connects(net, src: str, dst: str, port: int) -> bool:
    code = ("import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(({net.nodes[dst]!r}, {port}), timeout=1).close()\n"
            "except OSError:\n"
            "    sys.exit(1)\n")
    done = subprocess.run(["ip", "netns", "exec", net.ns(src), sys.executable, "-c", code],
                          capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.mark.usefixtures("netns_tools")
def test_a_partition_cuts_the_namespaces_apart_one_way_or_both_and_heals():
    from bookie.testing.nemesis.network import Network
    net = Network(2, with_zookeeper=False, prefix=f"nemt{os.getpid() % 10000}")
    server = None
    try:
        net.setup()
        code = ("import socket,time\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                f"s.bind(({net.nodes['b0']!r}, 7000)); s.listen(64)\n"
                "while True:\n    s.accept()[0].close()\n")
        server = subprocess.Popen(["ip", "netns", "exec", net.ns("b0"), sys.executable, "-c", code])
        deadline = time.monotonic() + 20
        while not _connects(net, "c0", "b0", 7000):
            assert time.monotonic() < deadline, "server in b0 never reachable"
        heal = net.partition("isolate_bookie", "both", (0,))
        assert not _connects(net, "c0", "b0", 7000)
        assert _connects(net, "ctl", "b0", 7000)  # the runner is never cut off
        heal()
        assert _connects(net, "c0", "b0", 7000)
        heal = net.partition("clients_from_bookies", "inbound", (0,))  # b0's answers dropped
        assert not _connects(net, "c1", "b0", 7000)
        assert _connects(net, "rc", "b0", 7000)  # recoveries still reach it
        net.heal()
        assert _connects(net, "c1", "b0", 7000)
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
        net.teardown()


def test_the_harness_reports_acknowledged_entries_that_a_short_close_dropped(tmp_path):
    """End to end, the checker has teeth: real writer processes, real bookies, then the
    ledger's metadata rewritten to close 10 entries short (what a recovery that closes short
    would leave): the round's check must count those entries lost."""
    import dataclasses

    from bookie.metadata import LedgerState, open_metadata
    from bookie.testing import LocalBookies
    from bookie.testing.nemesis.checker import check_round
    from bookie.testing.nemesis.history import load_history
    from bookie.testing.nemesis.runner import final_state
    from bookie.testing.nemesis.workload import Workload

    with LocalBookies(3, base_dir=str(tmp_path / "cluster")) as bookies:
        directory = tmp_path / "round"
        directory.mkdir()
        workload = Workload(str(directory), bookies.metadata_uri, seed=1, round_no=0,
                            writers=1, bookies=3)
        workload.start()
        deadline = time.monotonic() + 90
        while sum(ev["n"] for ev in load_history(str(directory)) if ev["ev"] == "ack") < 50:
            assert time.monotonic() < deadline, "the writer acknowledged too little in 90 s"
            time.sleep(0.5)
        workload.stop()
        events = load_history(str(directory))
        acked = {}
        for e in events:
            if e["ev"] == "ack":
                acked[e["l"]] = max(acked.get(e["l"], -1), e["e"] + e["n"] - 1)
        ledger_id = max(acked, key=acked.get)
        with open_metadata(bookies.metadata_uri) as store:
            meta, version = store.read_ledger(ledger_id)
            short = dataclasses.replace(meta, state=LedgerState.CLOSED,
                                        last_entry_id=acked[ledger_id] - 10)
            store.write_ledger(ledger_id, short, version)
        ledgers, logs = final_state(bookies.metadata_uri, sorted(acked), workload.log_name, print)
        report = check_round(events, ledgers, logs)
    kinds = {v.kind for v in report.violations}
    assert {"closed_below_ack", "lost"} <= kinds
    assert report.lost >= 10


def test_the_quiescent_check_reads_every_copy_and_finds_one_gone_and_a_deleted_ledger_back(
        tmp_path):
    """The per-replica check has teeth, on real bookies: a (3,2,2) ledger whose bookie 0 is
    then killed has entries on one bookie of their write set only (under the ack quorum), a
    ledger lost by bookie 0 is never healed, and a ledger the catalogue says was deleted but
    the store still lists has come back."""
    from bookie.client import BookKeeper
    from bookie.testing import LocalBookies
    from bookie.testing.nemesis.client_proc import DIGEST, PASSWORD
    from bookie.testing.nemesis.quiescent import check_state

    with LocalBookies(3, base_dir=str(tmp_path / "cluster")) as bookies:
        with BookKeeper(bookies.metadata_uri) as bk:
            lh = bk.create_ledger(3, 2, 2, digest=DIGEST, password=PASSWORD)
            payloads = {lh.add_entry(f"entry {i}".encode()): f"entry {i}".encode()
                        for i in range(30)}
            lh.close()
            other = bk.create_ledger(3, 2, 2, digest=DIGEST, password=PASSWORD)
            other.add_entry(b"x")
            other.close()
        healthy = check_state(bookies.metadata_uri, PASSWORD, {lh.ledger_id: payloads},
                              set(), set(), require_qw=True)
        assert healthy.violations == [] and healthy.replica_checks == 60
        bookies.kill(0)
        report = check_state(bookies.metadata_uri, PASSWORD, {lh.ledger_id: payloads},
                             {other.ledger_id}, {bookies.bookies[0]}, require_qw=True,
                             heal_timeout_s=0.5, read_timeout_s=2.0)
    kinds = sorted({v[0] for v in report.violations})
    assert kinds == ["deleted_came_back", "not_healed", "under_replicated"], \
        report.violations


def test_a_bookie_the_nemesis_restarts_from_a_thread_stays_up(tmp_path):
    """A bookie gets SIGTERM (PDEATHSIG) when the thread that started it ends: a restart (or
    an index rebuild, or a decommission) done in a thread of the nemesis must leave the start
    to the runner's own thread (``Nemesis.tick``), or the bookie dies as the thread ends."""
    from bookie.testing import LocalBookies
    from bookie.testing.nemesis.faults import Nemesis
    from bookie.testing.nemesis.schedule import Fault

    with LocalBookies(1, base_dir=str(tmp_path / "cluster")) as bookies:
        nemesis = Nemesis(bookies, log=print)
        old = bookies.procs[0].pid
        nemesis.inject(Fault(0.0, "restart_bookie", (0,), 1.0))
        deadline = time.monotonic() + 120
        while 0 in nemesis._restarting or bookies.procs[0].pid == old:  # as a round does
            assert time.monotonic() < deadline, "the restart never finished"
            nemesis.tick()
            time.sleep(0.05)
        bookies.wait_serving(0)
        time.sleep(1.0)
        assert bookies.running(0), bookies.log(0)[-3000:]
