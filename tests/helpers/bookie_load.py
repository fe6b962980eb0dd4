"""A pipelined add load against one bookie that remembers exactly what was acknowledged.

Used by the crash tests: whatever the bookie acknowledged must read back byte for byte after
any kill and restart.
"""

from __future__ import annotations

import os
import threading
import time

import zmq

from bookie import wire
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"crash-test-master-key"


class AddLoad(threading.Thread):
    """Sends batches of entries to ledger ``ledger_id`` with a window of outstanding batches."""

    def __init__(self, bookie_id: str, ledger_id: int, batch: int = 50, window: int = 8,
                 payload_bytes: int = 200, first_entry: int = 0):
        super().__init__(daemon=True)
        self.bookie_id = bookie_id
        self.ledger_id = ledger_id
        self.batch = batch
        self.window = window
        self.payload_bytes = payload_bytes
        self.next_entry = first_entry
        self.acked: dict[int, bytes] = {}  # entry_id -> entry bytes
        self.stop_flag = threading.Event()
        self.errors: list[str] = []
        self.statuses: dict[int, int] = {}

    def run(self) -> None:
        ctx = zmq.Context()
        client = RawBookieClient(self.bookie_id, timeout_s=2.0, ctx=ctx)
        sock = client.add_sock
        outstanding: dict[int, tuple[float, list[tuple[int, bytes]]]] = {}
        try:
            while not self.stop_flag.is_set():
                while len(outstanding) < self.window:
                    batch = []
                    for _ in range(self.batch):
                        eid = self.next_entry
                        self.next_entry += 1
                        batch.append((eid, make_entry(self.ledger_id, eid, os.urandom(self.payload_bytes))))
                    rid = client.send_add(self.ledger_id, [e for _, e in batch], KEY)
                    outstanding[rid] = (time.monotonic(), batch)
                if sock.poll(50):
                    frames = sock.recv_multipart()
                    _, status, rid, _ = wire.unpack_header(frames[0])
                    sent = outstanding.pop(rid, None)
                    self.statuses[status] = self.statuses.get(status, 0) + 1
                    if sent is not None and status == Status.OK:
                        for eid, entry in sent[1]:
                            self.acked[eid] = entry
                now = time.monotonic()
                for rid in [r for r, (t, _) in outstanding.items() if now - t > 3.0]:
                    del outstanding[rid]  # never acknowledged: nothing is owed for it
        finally:
            client.close()
            ctx.destroy(linger=0)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(10)


def verify_acked(bookie_id: str, ledger_id: int, acked: dict[int, bytes]) -> None:
    """Every acknowledged entry reads back identical (asserts, naming the first bad entry)."""
    with RawBookieClient(bookie_id, timeout_s=10.0) as c:
        ids = sorted(acked)
        i = 0
        while i < len(ids):
            first = ids[i]
            status, got = c.read(ledger_id, first, 1000)
            assert status == Status.OK, f"entry {first} of ledger {ledger_id}: status {status}"
            for k, entry in enumerate(got):
                eid = first + k
                if eid in acked:
                    assert entry == acked[eid], f"entry {eid} of ledger {ledger_id} differs"
            covered = first + len(got)
            while i < len(ids) and ids[i] < covered:
                i += 1
            if i < len(ids) and ids[i] == first:
                raise AssertionError(f"entry {first} of ledger {ledger_id} missing")
