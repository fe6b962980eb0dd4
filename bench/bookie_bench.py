"""``bookie bench bookie``: one bookie over the wire protocol, bypassing quorum logic (BenchBookie).

Theory of operation
-------------------
Two phases against the bookie's add socket, through one ZeroMQ DEALER (with ``--localbookie``
a ``disk`` phase first: 4 KiB pwrite + fdatasync of a preallocated file in the bookie's data
directory, as the journal writes its preallocated files: the floor a lone add stands on):

- ``sync``: one ADD of one entry at a time, the next sent when the previous is answered: the
  latency of a lone add (journal fdatasync included).  ``--sync-rate R`` paces it at R adds/s and
  records each latency with coordinated-omission correction for an interval of 1/R.
- ``pipelined``: ADD messages of ``--batch`` entries each, up to ``--window`` messages in flight,
  for ``--time`` seconds: the bookie's add throughput.  Every entry of a message gets that
  message's latency.  ``--rate R`` paces the messages so R entries/s are offered; a latency then
  counts from the message's *intended* send time, so the time a message waited for a window slot
  is part of it (open-loop measurement, free of coordinated omission).

Entries are built with numpy, a whole batch at a time: one buffer per batch size holds the
payload of every entry, and only the three header fields that change (entry_id, lac, length)
are rewritten, as big-endian arrays, before each send.  The digest field is zeros: the bookie
stores digests but never checks them, and this bench measures the bookie, not the client's
digest cost.  A ledger is made up on the spot (random id, fixed master key); the bookie learns a
ledger on its first add.

``AddPipeline`` is the pure part (what to send next, what a response means); ``run`` drives it
with a socket and a clock.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import orjson
import zmq

from bookie import wire
from bookie.client.connection import connect, parse_bookie  # noqa: F401 - bench.cli checks --bookie with it
from bookie.bench.report import NS_PER_S, Meter
from bookie.storage import journal
from bookie.bench.report import build_result, host_info, now_iso
from bookie.client.auth import client_curve
from bookie.client.config import ClientConfig
from bookie.client.resolver import BookieResolver
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, make_key_check

MASTER_KEY = b"bookie-bench-key-20b"  # any fixed 20 bytes
assert len(MASTER_KEY) == 20

_FIELDS = ("ledger_id", "entry_id", "lac", "length")


class BenchError(RuntimeError):
    """The bench cannot go on (the bookie refused, or stopped answering); one clear line."""


class EntryBatcher:
    """Formats batches of entries of one payload size as (lengths frame, data frame)."""

    def __init__(self, payload_size: int, digest: str = "crc32", seed: int = 0):
        self.payload_size = payload_size
        self.digest_size = wire.DIGEST_SIZES[digest]
        self.entry_size = wire.ENTRY_HEADER_SIZE + self.digest_size + payload_size
        self._dtype = np.dtype({"names": list(_FIELDS), "formats": [">i8"] * 4,
                                "offsets": [0, 8, 16, 24], "itemsize": self.entry_size})
        rng = np.random.default_rng(seed)
        self.payload = rng.integers(0, 256, payload_size, dtype=np.uint8)  # incompressible
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray, bytes]] = {}

    def _buffer(self, count: int):
        if count not in self._buffers:
            raw = np.zeros((count, self.entry_size), dtype=np.uint8)
            raw[:, wire.ENTRY_HEADER_SIZE + self.digest_size:] = self.payload
            lengths = np.full(count, self.entry_size, dtype=wire.LENGTHS_DTYPE).tobytes()
            self._buffers[count] = (raw, raw.reshape(-1).view(self._dtype), lengths)
        return self._buffers[count]

    def batch(self, ledger_id: int, first_entry_id: int, count: int, lac: int) -> tuple[bytes, bytes]:
        """Entries first_entry_id .. first_entry_id + count - 1 of a ledger, each carrying
        ``lac`` and the ledger length up to and including itself."""
        raw, rec, lengths = self._buffer(count)
        entry_ids = np.arange(first_entry_id, first_entry_id + count, dtype=np.int64)
        rec["ledger_id"] = ledger_id
        rec["entry_id"] = entry_ids
        rec["lac"] = lac
        rec["length"] = (entry_ids + 1) * self.payload_size
        return lengths, raw.tobytes()


@dataclasses.dataclass
class Send:
    request_id: int
    ledger_id: int
    first_entry_id: int
    count: int
    lac: int
    start_ns: int  # when the latency starts: the intended send time when paced


class Ledgers:
    """The ledgers a run writes and how far each has got; carried from phase to phase so entry
    ids never repeat."""

    def __init__(self, ledger_ids: list[int]):
        self.ids = list(ledger_ids)
        self.next_entry = {lid: 0 for lid in self.ids}
        self.acked_upto = {lid: -1 for lid in self.ids}

    @classmethod
    def new(cls, count: int, store=None, bookie: str = "") -> "Ledgers":
        """``count`` ledgers for the run.  A bookie with a metadata store stores nothing under
        an id the store does not know (bookie.core.ledgers): with ``store``, the ledgers are
        created there (owned by the bench's key; ``drop`` removes them after the run, so the
        bookie's GC reclaims their space); without one (a bookie run without a store), random
        ids far from the small ids a store hands out."""
        if store is None:
            return cls([int.from_bytes(os.urandom(7), "big") | (1 << 56) for _ in range(count)])
        meta = LedgerMetadata(1, 1, 1, key_check=make_key_check(MASTER_KEY), fragments=[(0, [bookie])])
        return cls([store.create_ledger(meta)[0] for _ in range(count)])

    def drop(self, store) -> None:
        for ledger_id in self.ids:
            store.remove_ledger(ledger_id)


class AddPipeline:
    """Which ADD to send next and what each answer means, for one phase.  No I/O.

    Args:
        ledgers: the ledgers written, round-robin one message each.
        batch: entries per message.
        window: messages in flight at most.
        limit: entries to send at most (None: no limit).
        rate: entries per second offered (None: as fast as the window allows).
        now_ns: the phase's start.
    """

    def __init__(self, ledgers: Ledgers, batch: int, window: int, limit: int | None,
                 rate: float | None, now_ns: int, from_intended: bool = True):
        self.ledgers = ledgers
        self.batch = batch
        self.window = window
        self.limit = limit
        self.interval_ns = int(batch * NS_PER_S / rate) if rate else 0
        # Paced open loop: latency counts from the intended send time, and a late sender
        # catches up.  Paced closed loop (from_intended=False, with a corrected histogram):
        # latency counts from the real send, and missed slots are skipped, not caught up.
        self.from_intended = from_intended
        self.due_ns = now_ns
        self.in_flight: dict[int, Send] = {}
        self.sent_entries = 0
        self.messages = 0
        self.stopped = False

    def can_send(self, now_ns: int) -> bool:
        return (not self.stopped and len(self.in_flight) < self.window
                and (self.limit is None or self.sent_entries < self.limit)
                and now_ns >= self.due_ns)

    def next(self, now_ns: int) -> Send:
        """The message to send now (call only when ``can_send``)."""
        ledgers = self.ledgers
        ledger_id = ledgers.ids[self.messages % len(ledgers.ids)]
        count = self.batch if self.limit is None else min(self.batch, self.limit - self.sent_entries)
        start = self.due_ns if self.interval_ns and self.from_intended else now_ns
        send = Send(self.messages, ledger_id, ledgers.next_entry[ledger_id], count,
                    ledgers.acked_upto[ledger_id], start)
        ledgers.next_entry[ledger_id] += count
        self.sent_entries += count
        self.messages += 1
        self.in_flight[send.request_id] = send
        if self.interval_ns:
            self.due_ns += self.interval_ns
            if not self.from_intended and self.due_ns < now_ns:
                self.due_ns = now_ns + self.interval_ns
        return send

    def answer(self, request_id: int, status: int) -> Send | None:
        """The bookie answered a message.  Returns it, or None for an id not in flight (a late
        or duplicate answer, ignored).

        Raises:
            BenchError: any status but OK and TOO_MANY_REQUESTS (which is counted, not fatal).
        """
        send = self.in_flight.pop(request_id, None)
        if send is None:
            return None
        if status not in (wire.Status.OK, wire.Status.TOO_MANY_REQUESTS):
            name = wire.Status(status).name if status in wire.Status._value2member_map_ else status
            hint = (" (a bookie with a metadata store stores nothing under an id the store does "
                    "not know: give the bench the bookie's store with --metadata URI)"
                    if name == "NO_LEDGER" else "")
            raise BenchError(f"the bookie answered {name} to an ADD of ledger {send.ledger_id}{hint}")
        if status == wire.Status.OK:
            last = send.first_entry_id + send.count - 1
            if last > self.ledgers.acked_upto[send.ledger_id]:
                self.ledgers.acked_upto[send.ledger_id] = last
        return send

    @property
    def done(self) -> bool:
        return (self.stopped or (self.limit is not None and self.sent_entries >= self.limit)) \
            and not self.in_flight


class BookieConnection:
    """A DEALER to one bookie's add socket.  Every wait is bounded by ``timeout_s``."""

    def __init__(self, ctx: zmq.Context, bookie: str, timeout_s: float, port_offset: int = 0,
                 curve=None, resolver=None):
        """``curve``: the client's keys (``bookie.client.auth.ClientCurve``); ``resolver``: a
        ``bookie.client.resolver.BookieResolver`` over the bookie's store, where its address and
        the key it proves are read (None: ``bookie`` is an address, its key from ``curve``)."""
        self.bookie = bookie
        self.timeout_s = timeout_s
        self.sock = connect(ctx, bookie, port_offset, curve, unbounded=True, resolver=resolver)

    def close(self) -> None:
        self.sock.close(0)

    def send_add(self, send: Send, batcher: EntryBatcher) -> None:
        lengths, data = batcher.batch(send.ledger_id, send.first_entry_id, send.count, send.lac)
        hdr = wire.pack_header(wire.Op.ADD, 0, send.request_id, send.ledger_id)
        self.sock.send_multipart((hdr, MASTER_KEY, lengths, data), copy=False)

    def info(self) -> dict:
        """The bookie's INFO answer; proves it is there before a run starts.

        Raises:
            BenchError: no answer within the timeout, or a bad one.
        """
        self.sock.send(wire.pack_header(wire.Op.INFO, 0, 2**63, 0))
        deadline = time.monotonic() + self.timeout_s
        while True:
            frames = self.recv(deadline)
            _op, status, request_id, _lid = wire.unpack_header(frames[0])
            if request_id != 2**63:
                continue
            if status != wire.Status.OK or len(frames) < 2:
                raise BenchError(f"bookie {self.bookie} answered INFO with status {status}")
            return orjson.loads(frames[1])

    def recv(self, deadline: float) -> list:
        """One message, waiting at most until ``deadline`` (time.monotonic)."""
        left_ms = max(int((deadline - time.monotonic()) * 1000), 0)
        if not self.sock.poll(left_ms):
            raise BenchError(f"no answer from bookie {self.bookie} within {self.timeout_s:g} s")
        return self.sock.recv_multipart()

    def recv_ready(self) -> list[list]:
        """Every message already waiting, without blocking."""
        out = []
        while True:
            try:
                out.append(self.sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return out




def run_phase(conn: BookieConnection, batcher: EntryBatcher, meter: Meter, pipe: AddPipeline,
              duration_s: float | None, *, corrected_interval_ns: int = 0,
              clock=time.monotonic_ns) -> dict:
    """Drive one phase until its time or entry limit is spent and every answer is in.

    Returns:
        the meter's figures plus ``messages`` and ``rejected`` (TOO_MANY_REQUESTS entries).
    Raises:
        BenchError: the bookie refused an add or stopped answering.
    """
    now = clock()
    meter.start(now)
    end_ns = now + int(duration_s * NS_PER_S) if duration_s else None
    timeout_ns = int(conn.timeout_s * NS_PER_S)
    last_answer = now
    rejected = 0
    payload = batcher.payload_size
    while not pipe.done:
        now = clock()
        if end_ns is not None and now >= end_ns:
            pipe.stopped = True
        while pipe.can_send(now):
            conn.send_add(pipe.next(now), batcher)
        if now >= meter.next_tick_ns:
            meter.tick(now, sum(s.count for s in pipe.in_flight.values()))
        wait_ms = 100
        if pipe.interval_ns and not pipe.stopped and len(pipe.in_flight) < pipe.window:
            wait_ms = max(min(wait_ms, (pipe.due_ns - now) // 1_000_000), 0)
        if pipe.in_flight and conn.sock.poll(wait_ms):
            for frames in conn.recv_ready():
                _op, status, request_id, _lid = wire.unpack_header(frames[0])
                send = pipe.answer(request_id, status)
                if send is None:
                    continue
                now = clock()
                last_answer = now
                if status != wire.Status.OK:
                    rejected += send.count
                    meter.record_error(send.count)
                elif corrected_interval_ns:
                    meter.record_corrected(now - send.start_ns, corrected_interval_ns,
                                           send.count, payload * send.count)
                else:
                    meter.record(now - send.start_ns, send.count, payload * send.count)
        elif not pipe.in_flight and pipe.interval_ns and not pipe.done:
            time.sleep(wait_ms / 1000)
        now = clock()
        if pipe.in_flight and now - last_answer > timeout_ns:
            raise BenchError(f"no answer from bookie {conn.bookie} within {conn.timeout_s:g} s "
                             f"({len(pipe.in_flight)} messages in flight)")
    figures = meter.finish(clock())
    figures["messages"] = pipe.messages
    figures["rejected"] = rejected
    return figures


DISK_BLOCK = 4096


def disk_baseline(directory: str, count: int = 400, emit=None) -> dict:
    """Latency of ``count`` 4 KiB pwrite + fdatasync at consecutive offsets of a file
    preallocated by writing zeros (synced before the first), as the journal writes its files;
    the file is removed after.  Returns the phase's figures (``Meter``)."""
    path = os.path.join(directory, f"disk-baseline-{os.getpid()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    meter = Meter("disk", unit="syncs", emit=emit)
    try:
        block = os.urandom(DISK_BLOCK)
        try:
            journal.prewrite_zeros(fd, 0, DISK_BLOCK * count)
            os.fdatasync(fd)
        except OSError:
            pass  # as the journal: the file grows with each write
        meter.start(time.monotonic_ns())
        for i in range(count):
            t0 = time.monotonic_ns()
            os.pwrite(fd, block, i * DISK_BLOCK)
            os.fdatasync(fd)
            now = time.monotonic_ns()
            meter.record(now - t0, 1, DISK_BLOCK)
            meter.tick(now)
        return meter.finish(time.monotonic_ns())
    finally:
        os.close(fd)
        os.unlink(path)


def run(params: dict, bookie: str, *, emit=None, data_dir: str | None = None,
        metadata_uri: str | None = None) -> dict:
    """The whole ``bench bookie`` run against ``bookie`` ("host:port").

    Args:
        params: the validated options (see ``bookie bench bookie --help``); recorded as given.
        emit: where progress lines go (None: quiet).
        data_dir: the bookie's data directory when it is local, for the host's disk figures.
        metadata_uri: the bookie's metadata store, where the run's ledgers are created (and
            removed after); None for a bookie run without a store.
    Returns:
        the result dict (see bench/README.md).
    Raises:
        BenchError: the bookie is not there, refused an add or stopped answering.
    """
    started = now_iso()
    host = host_info(data_dir)
    batcher = EntryBatcher(params["entrysize"], params["digest"])
    ctx = zmq.Context()
    curve = client_curve(ClientConfig.build(params.get("client_keys") or {}))
    store = ledgers = conn = None
    try:
        if metadata_uri:  # the bookie's registration names its address and key (issue 30)
            store = open_metadata(metadata_uri, timeout_s=params["timeout"])
        conn = BookieConnection(ctx, bookie, params["timeout"], curve=curve,
                                resolver=BookieResolver(store) if store is not None else None)
        host["bookie_info"] = conn.info()
        ledgers = Ledgers.new(params["ledgers"], store, bookie)
        phases = {}
        clock = time.monotonic_ns
        if params["sync_time"] > 0 and data_dir is not None:
            phases["disk"] = disk_baseline(data_dir, emit=emit)
        if params["sync_time"] > 0:
            rate = params["sync_rate"]
            pipe = AddPipeline(ledgers, 1, 1, params["sync_count"], rate, clock(),
                               from_intended=False)
            meter = Meter("sync", emit=emit)
            phases["sync"] = run_phase(
                conn, batcher, meter, pipe, params["sync_time"],
                corrected_interval_ns=int(NS_PER_S / rate) if rate else 0)
        if params["warmup_messages"]:
            pipe = AddPipeline(ledgers, params["batch"], params["window"],
                               params["warmup_messages"], None, clock())
            run_phase(conn, batcher, Meter("warmup", emit=None), pipe, None)
        pipe = AddPipeline(ledgers, params["batch"], params["window"], params["sendlimit"],
                           params["rate"], clock())
        phases["pipelined"] = run_phase(conn, batcher, Meter("pipelined", emit=emit), pipe,
                                        params["time"])
    finally:
        if conn is not None:
            conn.close()
        ctx.term()
        if store is not None:
            if ledgers is not None:
                ledgers.drop(store)
            store.close()
    figures = {"entry_bytes": batcher.entry_size}
    return build_result("bookie", dict(params, bookie=bookie), phases, host=host,
                        started=started, figures=figures)
