"""The bulk paths of the client: one completion per range of adds (``add_range_async``,
``add_entries_callback``, asyncio ``add_range``), batch entry formatting, and reads that
return many entries per request.  Correctness only: what ids, in what order, which errors."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import wire
from bookie.client import (AsyncBookKeeper, BookKeeper, DigestMismatchError, LedgerClosedError,
                           LedgerFencedError)
from bookie.client.digest import DIGEST_TYPES, DigestManager
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.pending import PendingAdds
from bookie.client.protocol.reader import Deliver, ReadOp
from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401

BOOKKEEPER_OPTIONS = {"bookies": 3}
PW = b"secret"


class Ranges:
    """An add callback that keeps every report, and an event once ``expect`` adds came in."""

    def __init__(self, expect: int):
        self.expect, self.calls, self.count = expect, [], 0
        self.all_in = threading.Event()

    def __call__(self, first, last, error):
        self.calls.append((first, last, error))
        self.count += (last - first + 1) if first >= 0 else self.expect - self.count
        if self.count >= self.expect:
            self.all_in.set()

    def wait(self):
        assert self.all_in.wait(30), f"only {self.count} of {self.expect} adds reported"
        return self.calls


# ---- pure parts ---------------------------------------------------------------------------------

@given(st.sampled_from(DIGEST_TYPES), st.integers(0, 2**40), st.integers(-1, 2**40),
       st.integers(0, 2**40), st.lists(st.binary(max_size=64), max_size=20))
def test_encode_many_formats_exactly_like_encode_one_at_a_time(digest, first, lac, length,
                                                               payloads):
    dm = DigestManager(7, digest, b"pw")
    datas, lengths = dm.encode_many(first, lac, length, payloads)
    want, running = [], length
    for i, p in enumerate(payloads):
        running += len(p)
        want.append(dm.encode(first + i, lac, running, p))
        assert lengths[i] == running
    assert datas == want
    assert [dm.decode(d).data for d in datas] == payloads


@given(st.lists(st.integers(1, 50), max_size=10))
def test_pending_extend_is_append_many(sizes):
    one, many = PendingAdds(3, 2, 2), PendingAdds(3, 2, 2)
    for n in sizes:
        datas = [b"%d" % i for i in range(n)]
        first = many.next_entry_id
        assert many.extend(datas) == first
        for d in datas:
            one.append(d)
    assert len(one) == len(many) and one.next_entry_id == many.next_entry_id
    for e in range(one.next_entry_id):
        assert one.data(e) == many.data(e)


@given(st.sampled_from(DIGEST_TYPES), st.lists(st.binary(max_size=64), min_size=1, max_size=30),
       st.data())
def test_decode_many_of_wire_frames_matches_decode_and_flags_bad_entries(digest, payloads, data):
    dm = DigestManager(7, digest, b"pw")
    datas, _ = dm.encode_many(0, -1, 0, payloads)
    bad = set()
    if digest != "dummy":
        bad = set(data.draw(st.lists(st.integers(0, len(datas) - 1), max_size=3)))
        for i in bad:  # flip the last byte of the digest
            d = bytearray(datas[i])
            d[32 + dm.size - 1] ^= 1
            datas[i] = bytes(d)
    if data.draw(st.booleans()):
        datas.append(b"short")  # shorter than header + digest
        bad.add(len(datas) - 1)
    out = dm.decode_many(A.RawEntries(*wire.pack_batch(datas)))
    assert len(out) == len(datas)
    for i, got in enumerate(out):
        if i in bad:
            assert isinstance(got, DigestMismatchError)
        else:
            assert got == dm.decode(datas[i]) and got.data == payloads[i]


def test_read_op_moves_a_bad_entry_of_a_bulk_answer_to_the_next_replica():
    info = LedgerInfo(ledger_id=7, ensemble_size=2, write_quorum=2, ack_quorum=2,
                      fragments=((0, ("b0:1", "b1:1")),))
    dm = DigestManager(7, "crc32c", b"pw")
    datas, _ = dm.encode_many(0, -1, 0, [b"e%d" % i for i in range(6)])
    op = ReadOp(info, 0, 5, dm.decode, decode_many=dm.decode_many)
    asks = op.start()
    # one striped READ per bookie: every other entry
    assert {(a.bookie, a.first_entry_id, a.max_count, a.stride) for a in asks} == \
        {("b0:1", 0, 3, 2), ("b1:1", 1, 3, 2)}
    corrupt = bytearray(datas[2])
    corrupt[-1] ^= 1
    delivered, retry = [], []
    for a in asks:
        ids = range(a.first_entry_id, a.first_entry_id + a.max_count * a.stride, a.stride)
        raws = [bytes(corrupt) if e == 2 else datas[e] for e in ids]
        for out in op.handle(A.ReadResponse(a, 0, A.RawEntries(*wire.pack_batch(raws)))):
            if isinstance(out, Deliver):
                delivered += [e.entry_id for e in out.entries]
            elif isinstance(out, A.SendRead):
                retry.append(out)
    assert [(r.bookie, r.first_entry_id) for r in retry] == [("b1:1", 2)]
    assert delivered == [0, 1]
    outs = op.handle(A.ReadResponse(retry[0], 0, A.RawEntries(*wire.pack_batch([datas[2]]))))
    assert [e.data for o in outs if isinstance(o, Deliver) for e in o.entries] == \
        [b"e2", b"e3", b"e4", b"e5"]
    assert op.done


# ---- against real bookies -----------------------------------------------------------------------

def test_add_range_async_gives_consecutive_ids_and_reads_back(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    payloads = [b"p%d-" % i + os.urandom(i % 40) for i in range(1000)]
    assert lh.add_range_async(payloads[:10]).result(30) == range(0, 10)
    assert lh.add_range_async(payloads[10:]).result(30) == range(10, 1000)
    assert lh.add_range_async([]).result(30) == range(0)
    assert lh.last_add_confirmed == 999
    lh.close()
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW)
    assert [e.data for e in rh.read_entries(0, 999)] == payloads


def test_add_entries_callback_reports_every_entry_once_in_order(bookkeeper):
    lh = bookkeeper.create_ledger(3, 3, 2, password=PW)
    cbs = [Ranges(n) for n in (1, 500, 37)]
    for cb in cbs:
        lh.add_entries_callback([b"x%d" % i for i in range(cb.expect)], cb)
    ids = []
    for cb in cbs:
        calls = cb.wait()
        assert all(err is None for _, _, err in calls)
        mine = [e for first, last, _ in calls for e in range(first, last + 1)]
        assert mine == list(range(mine[0], mine[0] + cb.expect))  # consecutive, in order
        ids += mine
    assert ids == list(range(538))
    lh.close()


def test_more_adds_than_the_throttle_go_in_parts_with_consecutive_ids(bookkeeper_ensemble):
    with BookKeeper(bookkeeper_ensemble.metadata_uri, throttle=50) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        results = {}

        def add(name):
            results[name] = lh.add_range_async([b"%s%d" % (name, i) for i in range(300)])
        threads = [threading.Thread(target=add, args=(n,)) for n in (b"a", b"b", b"c")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        got = sorted((f.result(30) for f in results.values()), key=lambda r: r.start)
        assert [len(r) for r in got] == [300, 300, 300]
        assert [r.start for r in got] == [0, 300, 600]  # each call's ids are one block
        assert bk._throttle.available == 50
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=PW)
        for name, fut in results.items():
            r = fut.result(0)
            assert [e.data for e in rh.read_entries(r.start, r.stop - 1)] == \
                [b"%s%d" % (name, i) for i in range(300)]


def test_adds_to_a_closed_ledger_are_refused_on_every_path(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    lh.add_entry(b"only")
    lh.close()
    with pytest.raises(LedgerClosedError):
        lh.add_range_async([b"a", b"b"]).result(30)
    cb = Ranges(2)
    lh.add_entries_callback([b"a", b"b"], cb)
    ((first, last, error),) = cb.wait()
    assert (first, last) == (-1, -1) and isinstance(error, LedgerClosedError)
    futures = lh.add_entries_async([b"a", b"b", b"c"])
    for f in futures:
        with pytest.raises(LedgerClosedError):
            f.result(30)
    assert bookkeeper._throttle.available == bookkeeper.config.throttle


def test_fencing_fails_the_unconfirmed_rest_of_a_range(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    assert lh.add_range_async([b"%d" % i for i in range(100)]).result(30) == range(100)
    bookkeeper.open_ledger(lh.ledger_id, password=PW)  # recovery fences the writer
    cb = Ranges(200)
    lh.add_entries_callback([b"late%d" % i for i in range(200)], cb)
    calls = cb.wait()
    assert all(isinstance(err, LedgerFencedError) for _, _, err in calls)
    assert calls[0][0] == 100 and calls[-1][1] == 299
    with pytest.raises(LedgerFencedError):
        lh.add_range_async([b"more"]).result(30)


def test_bookie_killed_mid_range_every_entry_confirmed_once(bookkeeper_ensemble):
    # 3 bookies, E=2: the spare one replaces the killed one (ensemble change, re-sends).
    with BookKeeper(bookkeeper_ensemble.metadata_uri, addEntryTimeout=1) as bk:
        lh = bk.create_ledger(2, 2, 2, password=PW)
        cb = Ranges(4000)
        lh.add_entries_callback([b"%d" % i for i in range(2000)], cb)
        victim = bookkeeper_ensemble.bookies.index(lh.metadata.last_ensemble[0])
        bookkeeper_ensemble.kill(victim)
        try:
            lh.add_entries_callback([b"%d" % i for i in range(2000, 4000)], cb)
            calls = cb.wait()
        finally:
            bookkeeper_ensemble.start(victim)
        assert all(err is None for _, _, err in calls)
        assert [e for f, l, _ in calls for e in range(f, l + 1)] == list(range(4000))
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=PW)
        assert [e.data for e in rh.read_entries(0, 3999)] == [b"%d" % i for i in range(4000)]


def test_asyncio_add_range(bookkeeper_ensemble):
    async def main():
        async with AsyncBookKeeper(bookkeeper_ensemble.metadata_uri, throttle=100) as bk:
            lh = await bk.create_ledger(3, 2, 2, password=PW)
            assert await lh.add_range([b"a", b"b", b"c"]) == range(0, 3)
            assert await lh.add_range([b"%d" % i for i in range(250)]) == range(3, 253)  # parts
            assert await lh.add_many([b"y", b"z"]) == [253, 254]
            assert await lh.add(b"w") == 255
            await lh.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_explicit_lac_goes_out_while_the_last_adds_drain():
    # Confirms keep coming after the last add: the bookies must still hear the LAC within
    # the interval of it moving past what the adds carried, not only once confirms stop.
    from bookie.client.protocol.writer import LedgerWriter
    info = LedgerInfo(ledger_id=7, ensemble_size=1, write_quorum=1, ack_quorum=1,
                      fragments=((0, ("b0:1",)),))
    dm = DigestManager(7, "crc32c", b"pw")
    w = LedgerWriter(info, 0, dm.encode, explicit_lac_interval_s=0.01,
                     encode_many=dm.encode_many)
    _, sends = w.add([b"x"] * 10, now=0.0)
    assert w.tick(0.02) == []  # the adds carried the LAC there was (-1)
    (send,) = sends
    t = 0.0
    told = []
    for e in range(10):  # one confirm every 4 ms, never a pause of 10 ms
        t += 0.004
        req = A.SendAdd(send.bookie, [e], [send.entries[e]])
        assert w.handle(A.AddResponse(req, 0), t) == [A.Confirm(e, e)]
        told += [(t, a.lac) for a in w.tick(t) if isinstance(a, A.SendWriteLac)]
    assert told and told[0][0] <= 0.004 + 0.01 + 0.004  # within interval + one tick of moving
    final = [a.lac for a in w.tick(t + 0.011) if isinstance(a, A.SendWriteLac)]
    assert max([lac for _, lac in told] + final) == 9
    assert w.tick(t + 1.0) == []  # told once: nothing more to say


def test_read_new_entries_async_follows_a_writer_to_its_close(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW, recovery=False)
    assert rh.read_new_entries_async(-1, timeout_s=0.2).result(30) == []  # nothing yet
    got = []
    done = threading.Event()

    def tail():
        while not done.is_set():
            entries = rh.read_new_entries_async(len(got) - 1, timeout_s=0.5,
                                                max_entries=7).result(30)
            assert len(entries) <= 7
            got.extend(e.data for e in entries)
            if not entries and rh.is_closed and len(got) - 1 >= rh.last_add_confirmed:
                return
    t = threading.Thread(target=tail)
    t.start()
    for i in range(0, 100, 10):
        lh.add_range_async([b"%d" % j for j in range(i, i + 10)]).result(30)
    lh.close()
    t.join(30)
    done.set()
    assert not t.is_alive()
    assert got == [b"%d" % j for j in range(100)]
