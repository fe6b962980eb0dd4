"""Logs (ledgers to logs) against real bookies, with the embedded metadata store and with
ZooKeeper: appends and reads across rolls, a second writer fencing the first, two writers
racing to open, and a writer SIGKILLed mid-append whose acknowledged appends all survive."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import orjson
import pytest

from bookie.client import (AsyncBookKeeper, BookKeeper, LedgerClosedError, LogFencedError,
                           LogPosition, NoSuchLedgerError, NoSuchLogError, delete_log,
                           list_logs, open_log, open_log_async, read_log, read_log_async)
from bookie.testing import LocalBookies

PW = b"pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}


@pytest.fixture(scope="module", params=["lmdb", "zk"])
def cluster(request):
    """Four real bookies on the embedded store, then on ZooKeeper (a fresh root)."""
    uri = None
    if request.param == "zk":
        server = request.getfixturevalue("zookeeper_server")
        uri = server.uri(server.chroot())
    with LocalBookies(4, metadata_uri=uri) as ens:
        failed = request.session.testsfailed
        yield ens
        if request.session.testsfailed > failed:
            for i in range(ens.n):
                print(f"--- bookie {i} log tail ---\n{ens.log(i)[-3000:]}")


@pytest.fixture(scope="module")
def bk(cluster):
    with BookKeeper(cluster.metadata_uri, CONFIG) as client:
        yield client


def new_name(request) -> str:
    return request.node.name.replace("[", "-").replace("]", "")


def everything(bk, name):
    return [(r.ledger_id, r.entry_id, r.data) for r in read_log(bk, name, password=PW)]


# ---- writing and reading ------------------------------------------------------------------------

def test_appends_read_back_in_order_across_rolls(bk, request):
    name = new_name(request)
    log = open_log(bk, name, 3, 2, 2, password=PW)
    positions, payloads = [], []
    for i in range(20):
        payloads.append(b"a%d" % i)
        positions.append(log.append(payloads[-1]))
    first_ledger = log.ledger_id
    assert positions == [LogPosition(first_ledger, i) for i in range(20)]
    second = log.roll()
    assert second != first_ledger and log.ledgers == [first_ledger, second]
    futures = [log.append_async(b"b%d" % i) for i in range(100)]
    payloads += [b"b%d" % i for i in range(100)]
    positions += [f.result(30) for f in futures]
    assert positions[20:] == [LogPosition(second, i) for i in range(100)]
    log.roll()
    positions.append(log.append(b"last"))
    payloads.append(b"last")
    # the writer's current ledger is open: readers see it up to its LAC, the rest fully
    seen = everything(bk, name)
    assert [(lid, eid) for lid, eid, _ in seen] == [tuple(p) for p in positions[:len(seen)]]
    assert len(seen) >= 120
    log.close()
    seen = everything(bk, name)
    assert [(lid, eid) for lid, eid, _ in seen] == [tuple(p) for p in positions]
    assert [d for _, _, d in seen] == payloads
    # from a position on (inclusive)
    tail = list(read_log(bk, name, start=positions[115], password=PW))
    assert [r.data for r in tail] == payloads[115:]
    assert name in list_logs(bk)
    # the record is the documented one
    data, _ = bk.metadata_store.get(f"/logs/{name}")
    assert orjson.loads(data)["format_version"] == 1
    assert orjson.loads(data)["ledgers"] == log.ledgers
    with pytest.raises(LedgerClosedError):
        log.append(b"after close")


def test_a_new_writer_continues_the_log_after_a_clean_close(bk, request):
    name = new_name(request)
    with open_log(bk, name, password=PW) as log:
        log.append(b"1")
    with open_log(bk, name, password=PW) as log:
        log.append(b"2")
        assert len(log.ledgers) == 2
    assert [d for _, _, d in everything(bk, name)] == [b"1", b"2"]


def test_automatic_roll_by_entries_and_by_size(bk, request):
    name = new_name(request)
    log = open_log(bk, name, password=PW, roll_entries=10)
    positions = [log.append(b"x%d" % i) for i in range(25)]
    assert len(log.ledgers) == 3
    assert [p.entry_id for p in positions] == list(range(10)) * 2 + list(range(5))
    log.close()
    log = open_log(bk, name, password=PW, roll_size_bytes=1000)
    futures = [log.append_async(b"y" * 300) for _ in range(10)]  # 4 per ledger (>= 1000 bytes)
    positions = [f.result(30) for f in futures]
    assert len({p.ledger_id for p in positions}) == 3
    log.close()
    assert len(everything(bk, name)) == 35


def test_delete_removes_the_record_then_the_ledgers(bk, request):
    name = new_name(request)
    log = open_log(bk, name, password=PW)
    log.append(b"x")
    log.roll()
    ledgers = log.ledgers
    log.close()
    delete_log(bk, name)
    assert name not in list_logs(bk)
    for lid in ledgers:
        with pytest.raises(NoSuchLedgerError):
            bk.open_ledger(lid, password=PW)
    with pytest.raises(NoSuchLogError):
        list(read_log(bk, name, password=PW))
    with pytest.raises(NoSuchLogError):
        delete_log(bk, name)
    with pytest.raises(NoSuchLogError):
        open_log(bk, name, password=PW, create=False)


def test_asyncio_log(cluster, request):
    name = new_name(request)

    async def main():
        async with AsyncBookKeeper(cluster.metadata_uri, CONFIG) as abk:
            log = await open_log_async(abk, name, password=PW, roll_entries=5)
            positions = [await log.append(b"%d" % i) for i in range(12)]
            await log.roll()
            await log.close()
            got = [r.position async for r in read_log_async(abk, name, password=PW)]
            assert got == positions
    asyncio.run(asyncio.wait_for(main(), 60))


# ---- writers taking over ----------------------------------------------------------------------

def test_second_writer_fences_the_first_and_keeps_every_acknowledged_append(cluster, bk,
                                                                          request):
    name = new_name(request)
    old = open_log(bk, name, password=PW)
    acked = {old.append(b"s%d" % i): b"s%d" % i for i in range(10)}
    old.roll()
    futures = [(old.append_async(b"f%d" % i), b"f%d" % i) for i in range(300)]
    next(iter(futures))[0].result(30)
    with BookKeeper(cluster.metadata_uri, CONFIG) as bk2:
        new = open_log(bk2, name, password=PW)  # fences the last two ledgers
        new_pos = new.append(b"new")
        with pytest.raises(LogFencedError, match="another writer"):
            old.append(b"late")
        for f, data in futures:
            try:
                acked[f.result(30)] = data
            except LogFencedError:
                pass
        with pytest.raises(LogFencedError):
            old.roll()
        new.close()
    seen = everything(bk, name)
    order = orjson.loads(bk.metadata_store.get(f"/logs/{name}")[0])["ledgers"]
    positions = [(lid, eid) for lid, eid, _ in seen]
    assert positions == sorted(positions, key=lambda p: (order.index(p[0]), p[1]))
    assert new_pos.ledger_id == order[-1]
    by_pos = {(lid, eid): d for lid, eid, d in seen}
    for pos, data in acked.items():
        assert by_pos[tuple(pos)] == data, f"acknowledged append at {pos} lost"
    assert seen[-1][2] == b"new"


def test_two_writers_racing_to_open_exactly_one_can_append(cluster, request):
    name = new_name(request)
    barrier = threading.Barrier(2)
    writers, errors = [None, None], [None, None]
    clients = [BookKeeper(cluster.metadata_uri, CONFIG) for _ in range(2)]

    def race(i):
        barrier.wait(10)
        try:
            writers[i] = open_log(clients[i], name, password=PW)
        except LogFencedError as exc:
            errors[i] = exc
    try:
        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        appended = []
        for w in writers:
            if w is None:
                continue
            try:
                appended.append(w.append(b"mine"))
            except LogFencedError:
                pass
        # both opens may succeed one after the other (the second then fences the first), or
        # one loses the CAS; either way exactly one writer can append
        assert len(appended) == 1, (writers, errors, appended)
        assert sum(e is not None for e in errors) + sum(w is not None for w in writers) == 2
        data, _ = clients[0].metadata_store.get(f"/logs/{name}")
        assert orjson.loads(data)["ledgers"][-1] == appended[0].ledger_id
    finally:
        for c in clients:
            c.close()


WRITER = textwrap.dedent("""
    import collections
    import sys
    from bookie.client import BookKeeper, open_log
    bk = BookKeeper(sys.argv[1], addEntryTimeout=2, throttle=500)
    log = open_log(bk, sys.argv[2], password=b"pw", roll_entries=400)
    print("open", flush=True)
    # each ack is printed as soon as it (and every earlier one) is in, while later appends are
    # still in flight: the test's SIGKILL lands mid-append, not after the last one
    pending = collections.deque()
    def ack(i, f):
        pos = f.result(60)
        print("acked", i, pos.ledger_id, pos.entry_id, flush=True)
    for n in range(100000):
        pending.append((n, log.append_async(b"%d" % n)))
        while pending and pending[0][1].done():
            ack(*pending.popleft())
    for i, f in pending:
        ack(i, f)
""")


def test_writer_killed_mid_append_every_acknowledged_append_survives(cluster, bk, request):
    name = new_name(request)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, cluster.metadata_uri, name],
                            stdout=subprocess.PIPE, text=True)
    acked = {}
    try:
        assert proc.stdout.readline().strip() == "open"
        deadline = time.monotonic() + 60
        while len(acked) < 1500 and time.monotonic() < deadline:
            parts = proc.stdout.readline().split()
            if parts and parts[0] == "acked":
                acked[(int(parts[2]), int(parts[3]))] = b"%d" % int(parts[1])
        os.kill(proc.pid, signal.SIGKILL)
        for line in proc.stdout:  # what it printed in its last moment was acknowledged too
            parts = line.split()
            if line.endswith("\n") and len(parts) == 4 and parts[0] == "acked":
                acked[(int(parts[2]), int(parts[3]))] = b"%d" % int(parts[1])
    finally:
        proc.kill()
        proc.wait(10)
    assert len(acked) >= 1500
    with open_log(bk, name, password=PW) as log:  # fences and recovers the dead writer's tail
        log.append(b"after")
    seen = everything(bk, name)
    by_pos = {(lid, eid): d for lid, eid, d in seen}
    lost = [p for p in acked if by_pos.get(p) != acked[p]]
    assert not lost, f"{len(lost)} acknowledged appends lost, e.g. {lost[:5]}"
    # the log is the writer's appends in order (a prefix of them), then the new writer's
    assert [d for _, _, d in seen] == [b"%d" % i for i in range(len(seen) - 1)] + [b"after"]
    assert len(seen) - 1 < 100000, "the writer was killed after its last append, not mid-append"
