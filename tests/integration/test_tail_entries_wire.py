"""A long poll that asks for entries (WITH_ENTRIES, issue 42 item 1) on a real bookie: the
answer carries the entries after previous_lac up to the LAC it reports and never past it,
limits beyond the bookie's are trimmed (not refused), a parked poll woken by an add carries the
entries too, and the 12-byte poll of before still answers exactly as it did."""

from __future__ import annotations

import threading
import time

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status

KEY = b"tail-key"
LEDGER = 7


def poll(c: RawBookieClient, previous: int, timeout_ms: int, max_entries=None, max_bytes=0,
         ledger: int = LEDGER):
    """(status, frames) of a long poll; with ``max_entries`` it asks for entries."""
    if max_entries is None:
        flags, body = int(Flag.LONG_POLL), wire.LONG_POLL_BODY.pack(previous, timeout_ms)
    else:
        flags = int(Flag.LONG_POLL | Flag.WITH_ENTRIES)
        body = wire.LONG_POLL_ENTRIES_BODY.pack(previous, timeout_ms, max_entries, max_bytes)
    return c.request(c.read_sock, Op.READ_LAC, ledger, flags, [body])


def entries_of(frames) -> list[bytes]:
    assert len(frames) == 3
    wire.check_entry_frames(frames[1], len(frames[2]))
    return [bytes(e) for e in wire.split_batch(frames[1], frames[2])]


def ids_of(entries) -> list[int]:
    return [wire.unpack_entry_header(e)[1] for e in entries]


def test_a_poll_with_entries_carries_them_up_to_its_lac_and_never_past_it():
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        with RawBookieClient(ens.bookies[0], timeout_s=30) as c:
            # entries 0..9, each carrying lac = id - 1: the bookie's LAC is 8, entry 9 is held
            # but not known to be confirmed
            sent = [make_entry(LEDGER, e, b"payload-%d" % e, lac=e - 1) for e in range(10)]
            assert c.add(LEDGER, sent, KEY) == Status.OK
            status, frames = poll(c, -1, 1000, max_entries=100, max_bytes=1 << 20)
            assert status == Status.OK
            lac, last = wire.LAC_BODY.unpack(frames[0])
            assert (lac, last) == (8, 9)
            got = entries_of(frames)
            assert got == sent[:9]  # byte for byte, up to the LAC, entry 9 not
            # from the middle, bounded by count
            status, frames = poll(c, 3, 1000, max_entries=2, max_bytes=1 << 20)
            assert ids_of(entries_of(frames)) == [4, 5]
            # bounded by bytes: the first always rides
            status, frames = poll(c, 3, 1000, max_entries=100, max_bytes=1)
            assert ids_of(entries_of(frames)) == [4]
            # limits past the bookie's own are trimmed, not refused
            status, frames = poll(c, -1, 1000, max_entries=2**32 - 1, max_bytes=2**32 - 1)
            assert status == Status.OK and entries_of(frames) == sent[:9]
            # a poll answered at its timeout (nothing past previous) carries no entries
            status, frames = poll(c, 8, 200, max_entries=100, max_bytes=1 << 20)
            assert status == Status.OK and wire.LAC_BODY.unpack(frames[0])[0] == 8
            assert entries_of(frames) == []
            # the 12-byte poll of before: the LAC body alone, as before
            status, frames = poll(c, -1, 1000)
            assert status == Status.OK and len(frames) == 1 and wire.LAC_BODY.unpack(frames[0]) == (8, 9)
            # a ledger this bookie never held: NO_LEDGER, no entries
            status, frames = poll(c, -1, 0, max_entries=10, ledger=LEDGER + 100)
            assert status == Status.NO_LEDGER and frames == []
            # WITH_ENTRIES without LONG_POLL, or a 12-byte body with it: BAD_REQUEST
            status, _ = c.request(c.read_sock, Op.READ_LAC, LEDGER, int(Flag.WITH_ENTRIES), [])
            assert status == Status.BAD_REQUEST
            status, _ = c.request(c.read_sock, Op.READ_LAC, LEDGER, int(Flag.LONG_POLL | Flag.WITH_ENTRIES),
                                  [wire.LONG_POLL_BODY.pack(-1, 100)])
            assert status == Status.BAD_REQUEST


def test_a_parked_poll_woken_by_an_add_carries_the_entries():
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        with RawBookieClient(ens.bookies[0], timeout_s=60) as c, \
                RawBookieClient(ens.bookies[0], timeout_s=60) as writer:
            first = [make_entry(LEDGER, e, b"a%d" % e, lac=e - 1) for e in range(3)]
            assert c.add(LEDGER, first, KEY) == Status.OK  # LAC 1
            answer = {}

            def parked():
                answer["at"] = time.monotonic()
                answer["got"] = poll(c, 1, 30_000, max_entries=1000, max_bytes=1 << 20)
                answer["took"] = time.monotonic() - answer["at"]
            t = threading.Thread(target=parked)
            t.start()
            time.sleep(0.5)  # parked by now
            more = [make_entry(LEDGER, e, b"b%d" % e, lac=e - 1) for e in range(3, 8)]
            assert writer.add(LEDGER, more, KEY) == Status.OK  # LAC 6
            t.join(30)
            status, frames = answer["got"]
            assert status == Status.OK and answer["took"] < 20
            lac = wire.LAC_BODY.unpack(frames[0])[0]
            got = entries_of(frames)
            assert lac >= 2 and ids_of(got) == list(range(2, lac + 1))
            assert got == (first + more)[2:lac + 1]
