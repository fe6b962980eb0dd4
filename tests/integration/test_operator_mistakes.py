"""An operator's mistakes are harmless: real ``bookie`` commands, real bookies, real ZooKeeper.

A second bookie on a running bookie's directories, a format under a running bookie, a metadata
URI with a typo, a port in use, a SIGKILL and a restart: each is refused in one line naming
what is wrong, before anything is created, or comes back as the same bookie with its data.
"""

from __future__ import annotations

import glob
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from bookie.client import BookKeeper, BookKeeperError
from bookie.metadata import CookieNotFoundError, open_metadata
from bookie.testing import LocalBookies

START_TIMEOUT_S = 90


def bookie(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """Run the ``bookie`` command to completion."""
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def sets(overrides: dict) -> list[str]:
    return [arg for k, v in overrides.items() for arg in ("--set", f"{k}={v}")]


def bookie_overrides(tmp_path, **more) -> dict:
    """A small bookie's configuration in fresh directories under ``tmp_path``."""
    for name in ("journal", "ledgers"):
        (tmp_path / name).mkdir(exist_ok=True)
    o = {"journalDirectory": str(tmp_path / "journal"),
         "ledgerDirectories": str(tmp_path / "ledgers"),
         "journalRingSizeMB": "8", "indexMapSizeMB": "64", "journalPreAllocSizeMB": "1",
         "registrationLeaseMs": "1000"}
    o.update({k: str(v) for k, v in more.items()})
    return o


class RunningBookie:
    """``bookie run`` in the background, its log in a file; every wait has a timeout."""

    def __init__(self, overrides: dict, log_path):
        self.log_path = str(log_path)
        self._offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "bookie", "run", *sets(overrides)],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode(errors="replace")

    def wait_serving(self) -> str:
        """The bookie id it serves as."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            m = re.search(r"bookie serving bookie_id=(\S+)", self.log())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"bookie exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise AssertionError(f"bookie not serving after {START_TIMEOUT_S} s:\n{self.log()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"bookie did not stop on SIGTERM:\n{self.log()}") from None


def write_and_read_back(metadata_uri: str, ensemble_size: int = 1) -> None:
    with BookKeeper(metadata_uri, addEntryTimeout=10.0) as bk:
        lh = bk.create_ledger(ensemble_size, ensemble_size, ensemble_size, password=b"pw")
        lh.add_entry(b"still serving")
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        assert [e.data for e in rh.read_entries(0, 0)] == [b"still serving"]
        rh.close()


_SESSION_START = time.time()


def runtime_leftovers(port: int) -> list[str]:
    """What a bookie on ``port`` made outside its directories during this test session: its run
    directory (and the ring directory of an older version; the ring is a memfd now).  Older ones
    are another run's, on a machine that ran bookies before (the port may be chosen again)."""
    def recent(path: str) -> bool:
        try:
            return os.stat(path).st_mtime >= _SESSION_START - 1
        except FileNotFoundError:
            return False
    return [p for p in (glob.glob(os.path.join(tempfile.gettempdir(), f"bk{port}-*"))
                        + glob.glob(f"/dev/shm/bookie-{port}-*.ring")) if recent(p)]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- 10: directories of a running bookie -------------------------------------------------------

@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One bookie (embedded store) that the refusals below must leave serving, untouched."""
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("running"))) as ens:
        yield ens


def test_a_second_bookie_on_a_running_bookies_directories_is_refused_naming_its_pid(running):
    log_before = running.log(0)
    r = bookie("run", *sets(running.overrides(0)))
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert f"pid {running.procs[0].pid}" in line and "in use" in line
    assert "replay" not in r.stderr  # it read nothing: no worker of it ever started
    assert running.log(0) == log_before
    write_and_read_back(running.metadata_uri)


def test_bookieformat_refuses_the_directories_of_a_running_bookie(running):
    o = running.overrides(0)
    r = bookie("shell", "bookieformat", "--non-interactive", "--force", *sets(o))
    assert r.returncode == 2
    assert f"pid {running.procs[0].pid}" in one_line(r.stderr)
    for d in (o["journalDirectory"], o["ledgerDirectories"]):
        assert os.path.isdir(os.path.join(d, "current"))
    with open_metadata(running.metadata_uri) as store:
        store.read_cookie(running.bookies[0])  # nor was its cookie removed from the store
    write_and_read_back(running.metadata_uri)


def test_metaformat_force_refuses_while_a_bookie_is_registered(running):
    r = bookie("shell", "metaformat", "--metadata", running.metadata_uri, "--non-interactive",
               "--force")
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert running.bookies[0] in line and "--force-while-bookies-registered" in line
    with open_metadata(running.metadata_uri) as store:
        assert store.list_bookies() == running.bookies
        store.read_cookie(running.bookies[0])
    write_and_read_back(running.metadata_uri)


def test_metaformat_wipes_under_registered_bookies_only_when_told_explicitly(zk_uri):
    with open_metadata(zk_uri) as store:
        store.register_bookie("127.0.0.1:3181", readonly=True)
        store.write_cookie("127.0.0.1:3181", b"cookie")
        r = bookie("shell", "metaformat", "--metadata", zk_uri, "--non-interactive", "--force")
        assert r.returncode == 2 and "127.0.0.1:3181" in one_line(r.stderr)
        assert store.read_cookie("127.0.0.1:3181")[0] == b"cookie"
        r = bookie("shell", "metaformat", "--metadata", zk_uri, "--non-interactive",
                   "--force-while-bookies-registered")
        assert r.returncode == 0, r.stderr
        with pytest.raises(CookieNotFoundError):
            store.read_cookie("127.0.0.1:3181")


def test_the_directory_lock_is_held_while_any_process_that_inherited_it_lives(tmp_path):
    from bookie.storage.dirlock import DirectoryInUseError, DirectoryLock

    dirs = [str(tmp_path / "journal"), str(tmp_path / "ledgers")]
    for d in dirs:
        os.mkdir(d)
    lock = DirectoryLock.acquire(dirs)
    with pytest.raises(DirectoryInUseError, match=f"pid {os.getpid()}"):
        DirectoryLock.acquire(dirs)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              pass_fds=lock.fds)
    try:
        lock.release()  # the supervisor is gone; its worker is not
        with pytest.raises(DirectoryInUseError):
            DirectoryLock.acquire([dirs[1]])
    finally:
        worker.kill()
        worker.wait(10)
    DirectoryLock.acquire(dirs).release()  # the last holder is gone: free


_SUPERVISOR_KILLED_WHILE_ITS_WORKER_STOPS = """
import subprocess, sys
from bookie.storage.dirlock import DirectoryLock
lock = DirectoryLock.acquire(sys.argv[1:])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], pass_fds=lock.fds,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("locked", flush=True)
"""


def test_a_start_waits_for_the_workers_of_a_killed_bookie_to_stop(tmp_path):
    from bookie.storage.dirlock import DirectoryInUseError, DirectoryLock

    supervisor = subprocess.run([sys.executable, "-c", _SUPERVISOR_KILLED_WHILE_ITS_WORKER_STOPS,
                                 str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert supervisor.stdout.strip() == "locked", supervisor.stderr
    with pytest.raises(DirectoryInUseError, match="which died") as held:
        DirectoryLock.acquire([str(tmp_path)])
    assert held.value.holder_dead
    DirectoryLock.acquire([str(tmp_path)], wait_for_dead_holder_s=60).release()  # raises if not


def test_a_successor_finds_only_what_a_killed_bookie_made(tmp_path):
    from bookie.storage.dirlock import DirectoryLock

    run_dir = tempfile.mkdtemp(prefix="bk1-")
    ring = tmp_path / "bookie-1-1.ring"
    ring.write_bytes(b"")
    lock = DirectoryLock.acquire([str(tmp_path)])
    lock.set_runtime(run_dir, str(ring))
    for fd in lock.fds:  # killed: no release
        os.close(fd)
    successor = DirectoryLock.acquire([str(tmp_path)])
    try:
        assert successor.leftovers() == [run_dir, str(ring)]
        successor.set_runtime(str(tmp_path), "/etc/passwd")  # not the shapes a bookie makes
    finally:
        os.rmdir(run_dir)
        for fd in successor.fds:
            os.close(fd)
    last = DirectoryLock.acquire([str(tmp_path)])
    assert last.leftovers() == []
    last.release()


def test_the_directory_lock_outlives_worker_restarts_and_dies_with_the_bookie(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "ens")) as ens:
        old = ens.kill_worker(0, "journal")
        ens.wait_worker_restarted(0, "journal", old)
        r = bookie("run", *sets(ens.overrides(0)))
        assert r.returncode == 2 and f"pid {ens.procs[0].pid}" in r.stderr
        # SIGKILL of the supervisor alone: its workers stop on their own (parent-death signal)
        # and release the lock when the last one exits; the next start waits for that.
        os.kill(ens.procs[0].pid, signal.SIGKILL)
        ens.procs[0].wait(10)
        ens.start(0)
        write_and_read_back(ens.metadata_uri)


# -- 11: a metadata URI that names no store ----------------------------------------------------

def _zk_node_exists(zookeeper_server, path: str) -> bool:
    from kazoo.client import KazooClient
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=10)
    try:
        return client.exists(path) is not None
    finally:
        client.stop()
        client.close()


@pytest.fixture(params=["lmdb", "zk"])
def uri_of_no_store(request, tmp_path):
    """(URI with a typo / a root never formatted, check that nothing was made there)."""
    if request.param == "lmdb":
        path = tmp_path / "metadta"  # the typo of .../metadata
        return f"lmdb://{path}", lambda: not path.exists()
    server = request.getfixturevalue("zookeeper_server")
    root = request.getfixturevalue("zk_root")
    return server.uri(root), lambda: not _zk_node_exists(server, root)


def test_a_bookie_refuses_a_metadata_uri_that_names_no_store(tmp_path, uri_of_no_store):
    uri, untouched = uri_of_no_store
    o = bookie_overrides(tmp_path, bookiePort=0, metadataServiceUri=uri)
    r = bookie("run", *sets(o))
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert f"bookie shell metaformat --metadata {uri}" in line and "reason=requested" not in line
    assert untouched()  # no new, empty, one-bookie cluster
    assert not os.path.exists(os.path.join(o["journalDirectory"], "current"))  # nor a cookie


def test_the_shell_the_client_and_the_benchmarks_refuse_a_uri_that_names_no_store(
        uri_of_no_store):
    uri, untouched = uri_of_no_store
    hint = f"bookie shell metaformat --metadata {uri}"
    r = bookie("shell", "listbookies", "--metadata", uri)
    assert r.returncode == 2 and hint in one_line(r.stderr)
    with pytest.raises(BookKeeperError, match=re.escape(hint)):
        BookKeeper(uri)
    r = bookie("bench", "writes", "--metadata", uri, "--ensemble", "1", "--quorum", "1",
               "--sendlimit", "10", "--warmup-messages", "0", "--quiet")
    assert r.returncode == 2 and hint in r.stderr and "Traceback" not in r.stderr
    assert untouched()
    r = bookie("shell", "metaformat", "--metadata", uri, "--non-interactive")
    assert r.returncode == 0, r.stderr  # the one command that creates a store
    assert bookie("shell", "listbookies", "--metadata", uri).returncode == 0


def test_metaformat_of_a_store_without_a_layout_record_keeps_its_data(tmp_path):
    """A store a bookie made before stores had to be created has data but no layout record:
    refused as never initialised, and metaformat (the hint) must not lose its data."""
    from bookie.metadata import LedgerMetadata, NoSuchStoreError

    uri = f"lmdb://{tmp_path}/metadata"
    with open_metadata(uri, create=True) as store:
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        store.write_cookie("127.0.0.1:3181", b"cookie")
        store.delete("/LAYOUT")
    with pytest.raises(NoSuchStoreError):
        open_metadata(uri)
    r = bookie("shell", "metaformat", "--metadata", uri, "--non-interactive")
    assert r.returncode == 0 and "kept" in r.stdout, r.stderr
    with open_metadata(uri) as store:
        assert store.read_ledger(ledger_id)[1] == 0
        assert store.read_cookie("127.0.0.1:3181")[0] == b"cookie"


# -- 12: ports in use --------------------------------------------------------------------------

@pytest.mark.parametrize("taken", ["bookiePort", "read port", "prometheusStatsHttpPort"])
def test_a_port_in_use_is_one_line_and_exit_2_before_anything_is_created(tmp_path, taken):
    from bookie.workers.ports import free_port_pair

    uri = f"lmdb://{tmp_path}/metadata"
    open_metadata(uri, create=True).close()
    port, metrics_port = free_port_pair("127.0.0.1"), free_port_pair("127.0.0.1")
    busy = {"bookiePort": port, "read port": port + 1, "prometheusStatsHttpPort": metrics_port}
    o = bookie_overrides(tmp_path, bookiePort=port, prometheusStatsHttpPort=metrics_port,
                         metadataServiceUri=uri)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", busy[taken]))
        squatter.listen(1)
        r = bookie("run", *sets(o))
    assert r.returncode == 2
    line = one_line(r.stderr)
    key = "bookiePort+1" if taken == "read port" else taken
    assert f"{key}={busy[taken]}" in line and "in use" in line
    assert "reason=requested" not in line
    with open_metadata(uri) as store:
        assert store.list_bookies() == []
        with pytest.raises(CookieNotFoundError):
            store.read_cookie(f"127.0.0.1:{port}")
    assert not os.path.exists(os.path.join(o["journalDirectory"], "current"))
    assert runtime_leftovers(port) == []


def test_one_port_configured_for_two_things_is_refused_in_one_line(tmp_path):
    from bookie.workers.ports import free_port_pair

    port = free_port_pair("127.0.0.1")
    o = bookie_overrides(tmp_path, bookiePort=port, prometheusStatsHttpPort=port + 1)
    r = bookie("run", *sets(o))
    assert r.returncode == 2
    assert f"prometheusStatsHttpPort={port + 1} is also bookiePort+1" in one_line(r.stderr)
    assert runtime_leftovers(port) == []


# -- 13: kills leave nothing that grows; restarts come back as the same bookie -----------------

def test_sigkilled_bookies_leave_nothing_that_grows(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "ens")) as ens:
        port = ens.ports[0]
        assert len(runtime_leftovers(port)) == 1  # the live bookie's run directory
        for _ in range(2):
            ens.kill(0)
            ens.start(0)
        assert len(runtime_leftovers(port)) == 1
        write_and_read_back(ens.metadata_uri)
    assert runtime_leftovers(port) == []


def test_a_throwaway_ensemble_closed_with_a_killed_bookie_leaves_nothing_behind(tmp_path):
    with LocalBookies(2) as ens:  # its own directory, as a user's test suite starts one
        ports = list(ens.ports)
        ens.kill(1)  # and never started again
        assert len(runtime_leftovers(ports[1])) == 1  # its run directory, until close
    assert runtime_leftovers(ports[0]) == [] and runtime_leftovers(ports[1]) == []


def test_localbookie_started_again_on_its_directory_keeps_its_bookies_and_data(tmp_path):
    base = str(tmp_path / "ens")
    with LocalBookies(1, base_dir=base) as ens:
        first_id = ens.bookies[0]
        with BookKeeper(ens.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"pw")
            for i in range(10):
                lh.add_entry(b"kept-%d" % i)
            lh.close()
    p = subprocess.Popen([sys.executable, "-m", "bookie", "localbookie", "1", "--dir", base,
                          "--no-smoke"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    try:
        out = ""
        deadline = time.monotonic() + START_TIMEOUT_S
        while "serving" not in out and time.monotonic() < deadline and p.poll() is None:
            out += p.stdout.readline()
        assert "localbookie: serving" in out, out + (p.stderr.read() if p.poll() is not None else "")
        assert re.search(r"^bookie 0: (\S+)", out, re.M).group(1) == first_id
        with BookKeeper(f"lmdb://{base}/metadata") as bk:
            rh = bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.data for e in rh.read_entries(0, 9)] == [b"kept-%d" % i for i in range(10)]
            rh.close()
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_a_bookie_with_port_0_comes_back_on_the_port_its_directories_remember(tmp_path):
    uri = f"lmdb://{tmp_path}/metadata"
    open_metadata(uri, create=True).close()
    o = bookie_overrides(tmp_path, bookiePort=0, metadataServiceUri=uri)
    first = RunningBookie(o, tmp_path / "bookie.log")
    try:
        bookie_id = first.wait_serving()
    finally:
        assert first.stop() == 0
    assert 'reason="signal SIGTERM"' in first.log()  # logfmt quotes a value with a space
    again = RunningBookie(o, tmp_path / "bookie.log")
    try:
        assert again.wait_serving() == bookie_id
        write_and_read_back(uri)
    finally:
        assert again.stop() == 0
