"""The add worker tells the read worker which ledgers moved only while a long poll is parked
(issue 34 item 2; core/long_polls.py WakeNews), and a poll that parks just as an add commits is
still answered at once, not at its timeout.

Each round starts with the news off (no poll parked for longer than the linger), sends a big
batch (the add worker spends milliseconds on it before its commit), then, 0 to 5 ms later, a
long poll that the batch passes: the poll parks on the LAC before the commit, and its SUBSCRIBE
reaches the add worker after that commit, which was made with the news off.  Only the re-check
on SUBSCRIBED (``ReadServer.recheck_polls``) then answers the poll before its timeout."""

from __future__ import annotations

import time

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status

KEY = b"news-key"
LEDGER = 4
POLL_MS = 120_000  # far beyond any wait under load: an answer before it is the re-check's
BATCH = 2000
PAYLOAD = b"p" * 1000


def test_a_poll_parked_as_an_add_commits_is_answered_at_once():
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        with RawBookieClient(ens.bookies[0], timeout_s=POLL_MS / 1000 + 60) as c:
            assert c.add(LEDGER, [make_entry(LEDGER, 0, b"e0")], KEY) == Status.OK
            lac, next_id = -1, 1
            for gap_s in (0.0, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0):
                time.sleep(1.3)  # no poll parked for over the linger: the news is off
                batch = [make_entry(LEDGER, e, PAYLOAD, lac=e - 1) for e in range(next_id, next_id + BATCH)]
                lengths, data = wire.pack_batch(batch)
                add = next(c._ids)
                c.add_sock.send_multipart([wire.pack_header(Op.ADD, 0, add, LEDGER), KEY, lengths, data])
                time.sleep(gap_s)
                poll = next(c._ids)
                c.read_sock.send_multipart([
                    wire.pack_header(Op.READ_LAC, Flag.LONG_POLL, poll, LEDGER),
                    wire.LONG_POLL_BODY.pack(lac, POLL_MS)])
                t0 = time.monotonic()
                assert c.wait(c.add_sock, add)[0] == Status.OK
                status, frames = c.wait(c.read_sock, poll)
                waited = time.monotonic() - t0
                assert status == Status.OK and wire.LAC_BODY.unpack(frames[0])[0] > lac
                assert waited < POLL_MS / 1000, f"gap {gap_s}: the poll was answered at its timeout"
                next_id += BATCH
                lac = next_id - 2
