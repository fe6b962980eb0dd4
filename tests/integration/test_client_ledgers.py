"""The client against real bookies (LocalBookies of 5, embedded metadata store): ledgers
created, written, closed, fenced, recovered, read and deleted through the public API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from bookie.client import (AsyncBookKeeper, BookKeeper, DigestMismatchError,
                           InvalidArgumentError, LedgerClosedError, LedgerFencedError,
                           NoSuchLedgerError, NotEnoughBookiesError, UnauthorizedError)
from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401
from recovery_helpers import recover_concurrently

BOOKKEEPER_OPTIONS = {"bookies": 5}
PW = b"secret"


def wait_until(predicate, timeout_s=20.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def restart(ens, bk, i):
    ens.start(i)
    wait_until(lambda: ens.bookies[i] in bk.metadata_store.list_bookies(), what="re-registration")


def gone(ens, bk, i):
    wait_until(lambda: ens.bookies[i] not in bk.metadata_store.list_bookies(),
               what="lease of the killed bookie to expire")


# ---- the basic cycle ----------------------------------------------------------------------------

@pytest.mark.parametrize("digest", ["crc32", "crc32c", "mac", "dummy"])
def test_create_add_close_open_read_round_trip(bookkeeper, digest):
    lh = bookkeeper.create_ledger(3, 2, 2, digest=digest, password=PW)
    payloads = [b"entry-%d-" % i + os.urandom(i % 50) for i in range(300)]
    assert [lh.add_entry(p) for p in payloads[:3]] == [0, 1, 2]
    futures = [lh.add_entry_async(p) for p in payloads[3:]]
    done_order = []
    for f in futures:
        f.add_done_callback(lambda f: done_order.append(f.result()))
    assert [f.result(30) for f in futures] == list(range(3, 300))
    assert done_order == list(range(3, 300))  # futures complete in entry order
    assert lh.last_add_confirmed == 299
    lh.close()
    assert lh.is_closed and lh.metadata.last_entry_id == 299
    assert lh.metadata.length == sum(map(len, payloads))
    rh = bookkeeper.open_ledger(lh.ledger_id, digest=digest, password=PW)
    assert rh.last_add_confirmed == 299
    assert [e.data for e in rh.read_entries(0, 299)] == payloads
    assert [e.entry_id for e in rh.read_entries(10, 12)] == [10, 11, 12]


def test_adds_after_close_fail_with_ledger_closed(bookkeeper):
    lh = bookkeeper.create_ledger(3, 3, 2, password=PW)
    lh.add_entry(b"only")
    lh.close()
    with pytest.raises(LedgerClosedError, match="closed"):
        lh.add_entry(b"late")
    with pytest.raises(LedgerClosedError):
        lh.add_entry_async(b"late").result(10)


def test_quorum_sizes_are_checked(bookkeeper):
    with pytest.raises(InvalidArgumentError, match="ensemble_size >= write_quorum"):
        bookkeeper.create_ledger(2, 3, 2, password=PW)
    with pytest.raises(NotEnoughBookiesError, match="writable bookie"):
        bookkeeper.create_ledger(9, 3, 2, password=PW)


def test_wrong_password_fails_without_fencing_and_wrong_digest_is_named(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    lh.add_entry(b"a")
    with pytest.raises(UnauthorizedError, match="nothing was fenced"):
        bookkeeper.open_ledger(lh.ledger_id, password=b"wrong")
    with pytest.raises(DigestMismatchError, match="crc32c"):
        bookkeeper.open_ledger(lh.ledger_id, digest="crc32", password=PW)
    assert lh.add_entry(b"b") == 1  # the writer was not fenced
    lh.close()


def test_open_without_recovery_does_not_fence_and_follows_the_writer(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    for i in range(5):
        lh.add_entry(b"%d" % i)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW, recovery=False)
    assert 3 <= rh.last_add_confirmed <= 4  # the LAC piggybacked on entry 4 is 3
    seen = [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]
    got = {}

    def tail():
        got["lac"] = rh.wait_for_last_add_confirmed(9, timeout_s=20)

    t = threading.Thread(target=tail)
    t.start()
    for i in range(5, 12):
        lh.add_entry(b"%d" % i)  # the writer keeps going: it was not fenced
    t.join(30)
    assert got["lac"] > 9
    seen += [e.data for e in rh.read_entries(len(seen), rh.last_add_confirmed)]
    assert seen == [b"%d" % i for i in range(len(seen))]
    lh.close()
    assert rh.read_last_add_confirmed() == 11


def test_reading_past_the_lac_is_refused_with_a_hint(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    lh.add_entry(b"x")
    with pytest.raises(InvalidArgumentError, match="read_last_add_confirmed"):
        list(lh.read_entries(0, 5))
    lh.close()


def test_delete_removes_the_ledger(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    lh.add_entry(b"x")
    lh.close()
    bookkeeper.delete_ledger(lh.ledger_id)
    with pytest.raises(NoSuchLedgerError, match=str(lh.ledger_id)):
        bookkeeper.open_ledger(lh.ledger_id, password=PW)
    with pytest.raises(NoSuchLedgerError):
        bookkeeper.delete_ledger(lh.ledger_id)


def test_asyncio_api(bookkeeper_ensemble):
    async def main():
        async with AsyncBookKeeper(bookkeeper_ensemble.metadata_uri) as bk:
            lh = await bk.create_ledger(3, 2, 2, digest="crc32c", password=PW)
            ids = await asyncio.gather(*(lh.add(b"a%d" % i) for i in range(50)))
            assert sorted(ids) == list(range(50))
            assert await lh.add_many([b"x", b"y"]) == [50, 51]
            await lh.close()
            rh = await bk.open_ledger(lh.ledger_id, digest="crc32c", password=PW)
            got = [e.entry_id async for e in rh.read_entries(0, rh.last_add_confirmed)]
            assert got == list(range(52))
            assert (await rh.read_entry(51)).data == b"y"
            await bk.delete_ledger(lh.ledger_id)
    asyncio.run(asyncio.wait_for(main(), 60))


# ---- fencing and recovery -----------------------------------------------------------------------

def test_recovery_closes_an_open_ledger_and_fences_its_writer(bookkeeper):
    lh = bookkeeper.create_ledger(3, 3, 2, password=PW)
    for i in range(20):
        lh.add_entry(b"%d" % i)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW)
    assert rh.is_closed and rh.last_add_confirmed == 19
    with pytest.raises(LedgerFencedError, match="fenced|recover"):
        lh.add_entry(b"late")
    with pytest.raises(LedgerFencedError):
        lh.close()
    assert [e.data for e in rh.read_entries(0, 19)] == [b"%d" % i for i in range(20)]


def test_two_concurrent_recoveries_converge(bookkeeper_ensemble, bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    futures = [lh.add_entry_async(b"%d" % i) for i in range(500)]
    acked = [f.result(30) for f in futures[:200]]
    (last_a, _, data_a), (last_b, _, data_b) = recover_concurrently(
        bookkeeper_ensemble.metadata_uri, lh.ledger_id, PW, {"readTimeout": 2}, timeout_s=60)
    assert last_a == last_b >= acked[-1]
    assert data_a == data_b == [b"%d" % i for i in range(last_a + 1)]
    for f in futures:  # the writer's adds either made it into the ledger or were fenced
        try:
            assert f.result(30) <= last_a
        except LedgerFencedError:
            pass


WRITER = textwrap.dedent("""
    import sys
    from bookie.client import BookKeeper
    bk = BookKeeper(sys.argv[1], addEntryTimeout=2, throttle=1000)
    lh = bk.create_ledger(3, 2, 2, password=b"secret")
    print("ledger", lh.ledger_id, flush=True)
    if sys.argv[2] == "kill":
        futures = [lh.add_entry_async(b"%d" % i) for i in range(20000)]
        for f in futures:
            print("acked", f.result(60), flush=True)
    else:
        for i in range(10):
            lh.add_entry(b"%d" % i)
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            lh.add_entry(b"after")
            print("added", flush=True)
        except Exception as exc:
            print("error", type(exc).__name__, flush=True)
""")


def start_writer(uri, mode):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, uri, mode], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True)
    first = proc.stdout.readline().split()
    assert first[0] == "ledger", first
    return proc, int(first[1])


def test_writer_killed_mid_write_every_acknowledged_entry_survives_recovery(
        bookkeeper_ensemble, bookkeeper):
    proc, ledger_id = start_writer(bookkeeper_ensemble.metadata_uri, "kill")
    try:
        last_acked = -1
        deadline = time.monotonic() + 60
        while last_acked < 2000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("acked"):
                last_acked = int(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
        # what the writer printed in its last moments was acknowledged too
        for line in proc.stdout:
            if line.startswith("acked") and line.endswith("\n"):  # not a half-written line
                last_acked = int(line.split()[1])
    finally:
        proc.kill()
        proc.wait(10)
    assert last_acked >= 2000
    rh = bookkeeper.open_ledger(ledger_id, password=PW)
    assert rh.is_closed and rh.last_add_confirmed >= last_acked
    data = [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]
    assert data == [b"%d" % i for i in range(len(data))]


def test_writer_in_another_process_is_fenced_by_recovery(bookkeeper_ensemble, bookkeeper):
    proc, ledger_id = start_writer(bookkeeper_ensemble.metadata_uri, "fence")
    try:
        assert proc.stdout.readline().strip() == "ready"
        rh = bookkeeper.open_ledger(ledger_id, password=PW)
        assert rh.last_add_confirmed == 9
        out, _ = proc.communicate("go\n", timeout=60)
    finally:
        proc.kill()
    assert out.strip() == "error LedgerFencedError"


# ---- bookie failures ----------------------------------------------------------------------------

def test_bookie_killed_mid_write_changes_ensemble_and_loses_nothing(bookkeeper_ensemble,
                                                                    bookkeeper):
    ens, bk = bookkeeper_ensemble, bookkeeper
    lh = bk.create_ledger(3, 2, 2, password=PW)  # Qw = Qa: no add completes without the victim
    victim = ens.bookies.index(lh.metadata.fragments[0][1][1])
    futures = [lh.add_entry_async(b"%d" % i) for i in range(2000)]
    [f.result(30) for f in futures[:500]]
    ens.kill(victim)
    try:
        futures += [lh.add_entry_async(b"%d" % i) for i in range(2000, 4000)]
        assert [f.result(60) for f in futures] == list(range(4000))
        frags = lh.metadata.fragments
        assert len(frags) >= 2 and ens.bookies[victim] not in frags[-1][1]
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=PW)
        assert [e.data for e in rh.read_entries(0, 3999)] == [b"%d" % i for i in range(4000)]
    finally:
        restart(ens, bk, victim)


def test_reads_work_with_ack_quorum_minus_one_bookies_down(bookkeeper_ensemble, bookkeeper):
    ens, bk = bookkeeper_ensemble, bookkeeper
    lh = bk.create_ledger(3, 3, 2, password=PW)
    for i in range(30):
        lh.add_entry(b"%d" % i)
    lh.close()
    victim = ens.bookies.index(lh.metadata.fragments[0][1][0])
    ens.kill(victim)
    try:
        rh = bk.open_ledger(lh.ledger_id, password=PW)
        assert [e.data for e in rh.read_entries(0, 29)] == [b"%d" % i for i in range(30)]
        # and an unclosed ledger still recovers with one bookie of its ensemble down (the
        # victim must be out of the registrations first, or the new ensemble may hold it: the
        # read above no longer waits out a read timeout on it, only a speculative one)
        gone(ens, bk, victim)
        lh2 = bk.create_ledger(3, 3, 2, password=PW)
        for i in range(5):
            lh2.add_entry(b"%d" % i)
        lh2_victim = [b for b in lh2.metadata.last_ensemble if b != ens.bookies[victim]][0]
        k = ens.bookies.index(lh2_victim)
        ens.kill(k)
        try:
            rh2 = bk.open_ledger(lh2.ledger_id, password=PW)
            assert rh2.last_add_confirmed == 4
            assert [e.data for e in rh2.read_entries(0, 4)] == [b"%d" % i for i in range(5)]
        finally:
            restart(ens, bk, k)
    finally:
        restart(ens, bk, victim)


def test_read_only_bookies_are_not_chosen_for_new_ledgers(bookkeeper_ensemble, bookkeeper):
    ens, bk = bookkeeper_ensemble, bookkeeper
    store = bk.metadata_store
    readonly = [0, 1]

    def make_readonly():
        # (re-)signalled before each check: the supervisor's periodic disk check may undo a
        # forced read-only mode (reported to the bookie's owner)
        for i in readonly:
            ens.set_readonly(i, True)
        wait_until(lambda: set(ens.bookies[i] for i in readonly)
                   <= set(store.list_bookies(readonly=True)), what="read-only registration")
        wait_until(lambda: not set(ens.bookies[i] for i in readonly)
                   & set(store.list_bookies()), what="read-only bookies to leave the writable list")
    try:
        for _ in range(10):
            make_readonly()
            lh = bk.create_ledger(3, 2, 2, password=PW)
            assert not set(lh.metadata.last_ensemble) & {ens.bookies[i] for i in readonly}
            lh.close()
        make_readonly()
        with pytest.raises(NotEnoughBookiesError, match="only 3 writable") as refused:
            bk.create_ledger(4, 2, 2, password=PW)
        # the read-only ones are named, with the usual reason: not mistaken for bookies down
        message = str(refused.value)
        assert "2 read-only" in message and "diskUsageThreshold" in message
        assert all(ens.bookies[i] in message for i in readonly)
    finally:
        for i in readonly:
            ens.set_readonly(i, False)
        wait_until(lambda: set(ens.bookies) <= set(store.list_bookies()), what="writable again")


def test_an_empty_password_is_refused_unless_the_client_allows_it(bookkeeper_ensemble):
    with BookKeeper(bookkeeper_ensemble.metadata_uri) as bk:
        with pytest.raises(InvalidArgumentError, match="allowEmptyPassword"):
            bk.create_ledger(3, 2, 2)
        with pytest.raises(InvalidArgumentError, match="empty password"):
            bk.create_ledger(3, 2, 2, password=b"")
    with BookKeeper(bookkeeper_ensemble.metadata_uri, allowEmptyPassword=True) as bk:
        lh = bk.create_ledger(3, 2, 2)
        assert lh.add_entry(b"x") == 0
        lh.close()
        assert [e.data for e in bk.open_ledger(lh.ledger_id).read_entries(0, 0)] == [b"x"]
