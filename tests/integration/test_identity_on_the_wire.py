"""The bookie that answers is the bookie the metadata names, proven by its key (issue 30).

Real bookies with ``bookieId``s, a real client.  A bookie stops and something else takes its
address: another bookie restarted on its old port (a container back on another port, a host
renumbered), or a plain process of another user that answers every request OK.  Neither ever
acknowledges an add meant for the stopped bookie, nor is fenced or read by a recovery in its
place: every entry a fragment assigns to the stopped bookie is on it when it comes back.
The client's scenarios run both ways: over the bookies' local sockets and over TCP.
"""

import os
import pwd
import subprocess
import sys
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.digest import master_key
from bookie.client.resolver import BookieResolver, UnresolvedBookieError
from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status

PASSWORD = b"identity"
IDS = ["bk-0", "bk-1", "bk-2"]


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ledger_on_1_and_2(ens, bk):
    """A ledger E=2 Qw=2 Qa=2 on bk-1 and bk-2 (bk-0 read-only while it is created)."""
    ens.set_readonly(0)
    wait_for(lambda: "bk-0" in bk.metadata_store.list_bookies(readonly=True),
             what="bk-0 read-only")
    lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
    assert sorted(lh.metadata.fragments[0][1]) == ["bk-1", "bk-2"]
    return lh


def entries_on(store, bookie_id: str, ledger_id: int, first: int, last: int) -> list[int]:
    """The entry ids of first..last that ``bookie_id`` holds (read straight from it, found
    through its registration in ``store``)."""
    held = []
    with RawBookieClient(bookie_id, timeout_s=10, resolver=BookieResolver(store)) as raw:
        for e in range(first, last + 1):
            status, got = raw.read(ledger_id, e)
            if status == Status.OK and got:
                held.append(e)
    return held


def assert_fragments_held(bk, ledger_id: int, last_entry_id: int, bookie_id: str) -> None:
    """Every entry that a fragment of the ledger's metadata assigns to ``bookie_id`` (E=Qw:
    every entry of a fragment naming it) is on it."""
    meta = bk.metadata_store.read_ledger(ledger_id)[0]
    fragments = list(meta.fragments)
    for i, (first, ensemble) in enumerate(fragments):
        end = fragments[i + 1][0] - 1 if i + 1 < len(fragments) else last_entry_id
        if bookie_id in ensemble and first <= end:
            assert entries_on(bk.metadata_store, bookie_id, ledger_id, first, end) == list(range(first, end + 1)), \
                (fragments, bookie_id)


@pytest.fixture(params=[True, False], ids=["local-sockets", "tcp"])
def use_local(request):
    """The client's useLocalSockets: each scenario over the bookies' local sockets (the default
    on their host) and over TCP with the pinned key (issue 40)."""
    return request.param


@pytest.fixture
def ens(tmp_path):
    with LocalBookies(3, base_dir=str(tmp_path / "e"), bookie_ids=IDS) as e:
        yield e


def move_bk0_onto_bk1s_port(ens) -> int:
    """Stop bk-1, then restart bk-0 on bk-1's old port; returns that port."""
    old = ens.ports[1]
    assert ens.stop(1) == 0
    ens.stop(0)
    ens.ports[0] = old
    ens.start(0)
    return old


def test_another_bookie_on_a_stopped_bookies_address_never_acknowledges_its_adds(ens, use_local):
    with BookKeeper(ens.metadata_uri, addEntryTimeout=3, readTimeout=3, useLocalSockets=use_local) as bk:
        lh = ledger_on_1_and_2(ens, bk)
        for e in range(5):
            lh.add_entry(b"before %d" % e)
        move_bk0_onto_bk1s_port(ens)
        futures = [lh.add_entry_async(b"after %d" % e) for e in range(5, 10)]
        ens.ports[1] = ens.reserve_port()  # bk-1 comes back elsewhere: its old port is taken
        ens.start(1)
        for f in futures:
            bk.wait(f, 60)
        lh.close()
        # bk-1 holds every entry a fragment naming it covers: nothing of its share went to bk-0
        assert_fragments_held(bk, lh.ledger_id, 9, "bk-1")
        rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)
        got = [bytes(e.data) for e in rh.read_entries(0, 9)]
        assert got == [b"before %d" % e for e in range(5)] + [b"after %d" % e for e in range(5, 10)]


def test_a_recovering_reader_never_fences_or_reads_another_bookie_in_a_stopped_ones_place(ens,
                                                                                         use_local):
    with BookKeeper(ens.metadata_uri, addEntryTimeout=3, readTimeout=3, useLocalSockets=use_local) as writer:
        lh = ledger_on_1_and_2(ens, writer)
        for e in range(5):
            lh.add_entry(b"entry %d" % e)
        ledger_id = lh.ledger_id
        with BookKeeper(ens.metadata_uri, addEntryTimeout=3, readTimeout=3, useLocalSockets=use_local) as reader:
            # the reader has met bk-1 at its address before it stops
            tail = reader.open_ledger(ledger_id, password=PASSWORD, recovery=False)
            assert len(list(tail.read_entries(0, tail.last_add_confirmed))) >= 4
            move_bk0_onto_bk1s_port(ens)
            rh = reader.open_ledger(ledger_id, password=PASSWORD)  # recovers, fences
            assert rh.last_add_confirmed == 4
            assert [bytes(e.data) for e in rh.read_entries(0, 4)] == \
                [b"entry %d" % e for e in range(5)]
            # bk-0, on bk-1's old address, was never fenced for the ledger nor read for it
            with RawBookieClient("bk-0", timeout_s=10,
                                 resolver=BookieResolver(reader.metadata_store)) as raw:
                assert raw.read(ledger_id, 0)[0] != Status.OK
                # a fenced ledger refuses normal adds: bk-0 was not fenced for it
                add = raw.add(ledger_id, [make_entry(ledger_id, 5, b"probe")],
                              master_key(PASSWORD))
                assert add != Status.FENCED
    ens.ports[1] = ens.reserve_port()
    ens.start(1)
    with BookKeeper(ens.metadata_uri) as bk:
        assert entries_on(bk.metadata_store, "bk-1", ledger_id, 0, 4) == [0, 1, 2, 3, 4]


IMPOSTOR = """
import os, sys, zmq
from bookie import wire
uid, port = int(sys.argv[1]), int(sys.argv[2])
ctx = zmq.Context()
socks = []
for p in (port, port + 1):
    s = ctx.socket(zmq.ROUTER)
    s.linger = 0
    s.bind(f"tcp://127.0.0.1:{p}")
    socks.append(s)
if uid >= 0 and os.getuid() == 0:
    os.setgroups([]); os.setuid(uid)
print("bound", flush=True)
poller = zmq.Poller()
for s in socks:
    poller.register(s, zmq.POLLIN)
seen = 0
while True:
    for s, _ in poller.poll(1000):
        frames = s.recv_multipart()
        seen += 1
        print("request", seen, flush=True)  # to the test, whatever this user may write
        op, _flags, rid, ledger = wire.unpack_header(frames[1])
        s.send_multipart([frames[0], wire.pack_header(op, 0, rid, ledger),
                          wire.LAC_BODY.pack(99, 99)])
"""


def other_uid() -> int:
    if os.getuid() != 0:
        return -1  # run as ourselves: still not the bookie, and it has no key
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return -1


def test_a_plain_process_on_a_stopped_bookies_port_never_acknowledges_an_add(tmp_path, use_local):
    with LocalBookies(3, base_dir=str(tmp_path / "e")) as ens, \
            BookKeeper(ens.metadata_uri, addEntryTimeout=3, readTimeout=3, useLocalSockets=use_local) as bk:
        ens.set_readonly(0)
        wait_for(lambda: ens.bookies[0] in bk.metadata_store.list_bookies(readonly=True),
                 what="bookie 0 read-only")
        lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        target = lh.metadata.fragments[0][1][0]
        i = ens.bookies.index(target)
        for e in range(3):
            lh.add_entry(b"e%d" % e)
        ens.set_readonly(0, False)
        ens.kill(i)  # SIGKILL: its registration outlives it for a lease, naming the address
        impostor = subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(other_uid()),
                                     str(ens.ports[i])], stdout=subprocess.PIPE)
        try:
            assert impostor.stdout.readline().strip() == b"bound"
            try:  # while its registration still names the address (a lease): no answer
                with RawBookieClient(target, timeout_s=2) as raw:
                    with pytest.raises(BookieTimeout):
                        raw.add(lh.ledger_id, [make_entry(lh.ledger_id, 3, b"x")], b"k")
            except UnresolvedBookieError:
                pass  # the lease ran out first: down, not connected to at all
            for e in range(3, 8):
                lh.add_entry(b"e%d" % e)  # acknowledged by the ensemble that replaced it
        finally:
            impostor.kill()
            said = impostor.communicate()[0]
        assert b"request" not in said, "the impostor was sent a request"
        ens.start(i)
        lh.close()
        assert_fragments_held(bk, lh.ledger_id, 7, target)
