"""``bookie bench reads --listen N``: tailing ledgers while a writer writes them.

A writer in a child process (its own client, its own core) writes N fresh ledgers at full speed
(``--throttle`` outstanding; or ``--rate`` adds/s, paced) for ``--time`` seconds, each payload
starting with the monotonic time its add was issued (CLOCK_MONOTONIC is one clock for the whole
host).  The reader opens them without recovery and follows each one's last-add-confirmed with
long polls, reading what became readable.  ``lag_ms`` of an entry is from the writer's client
confirming it to the reader holding it; ``e2e_ms`` from its add being issued (the write latency
plus the lag).

Where the lag comes from: a bookie learns that entry e is confirmed from the LAC that a later add
carries (or from an explicit LAC write), and its parked long polls are answered as soon as the
bookie has taken (indexed) that later add, not once it is durable (docs/architecture.md "Long
polls and the LAC").  The later add is sent when e's ack arrives, behind every add the writer
has in flight: so the lag was about the time an add waits to reach the bookie, which grows
with the writer's window (Little's law: ``--throttle`` 10,000 at full speed is a deep queue).
Hence the client's LAC notice (``lacNoticeInterval``, docs/client.md "`LedgerHandle`"): a writer with
adds outstanding whose acks wait at least the interval (a deep queue) sends its new LAC at once,
on a connection of its own that the bookie takes between the queued adds.  ``--set
lacNoticeInterval=0`` measures the path without it.
"""

from __future__ import annotations

import collections
import multiprocessing
import threading
import time

import numpy as np

from bookie.bench.load import AddLoad, BenchError, open_client, open_ledger, payload_bytes
from bookie.bench.histogram import Histogram
from bookie.bench.report import NS_PER_S, Meter, latency_figures


class TailReader:
    """Follows one ledger being written: long-poll its LAC, read what became readable, note
    each entry's lag (see the module doc).  Runs on its own thread; ``lock`` guards the shared
    meter and lag histogram."""

    def __init__(self, rh, batch: int, meter: Meter, e2e: Histogram, lock: threading.Lock,
                 deadline_ns: int, clock=time.monotonic_ns, *, window: int = 8,
                 entry_bytes: int = 0):
        self.rh, self.batch, self.meter, self.e2e, self.lock = rh, batch, meter, e2e, lock
        self.window, self.entry_bytes = window, entry_bytes
        self.deadline_ns = deadline_ns
        self.clock = clock
        self.read_upto = -1
        self.reads: list[tuple[int, int, int]] = []  # (first, last, time read) per read
        self.error: BaseException | None = None

    def read_times(self) -> np.ndarray:
        """When each entry 0 .. read_upto was read, by entry id."""
        if not self.reads:
            return np.zeros(0, dtype=np.int64)
        r = np.asarray(self.reads, dtype=np.int64)
        return np.repeat(r[:, 2], r[:, 1] - r[:, 0] + 1)

    def run(self) -> None:
        try:
            self._follow()
        except BaseException as e:  # reported by the caller, never lost with the thread
            self.error = e

    def _follow(self) -> None:
        """Entries known to be confirmed are read with up to ``window`` reads of ``batch``
        entries in flight, answers handled in order; once caught up, one
        ``read_new_entries_async`` (the long poll and the read after it in one client step)
        waits for more."""
        rh = self.rh
        in_flight: collections.deque = collections.deque()  # (sent, future)
        asked_upto = self.read_upto
        while self.clock() < self.deadline_ns:
            lac = rh.last_add_confirmed
            while len(in_flight) < self.window and asked_upto < lac:
                last = min(lac, asked_upto + self.batch)
                in_flight.append((self.clock(), rh.read_entries_async(asked_upto + 1, last)))
                asked_upto = last
            if in_flight:
                sent, fut = in_flight.popleft()
            else:
                if rh.is_closed and self.read_upto >= rh.last_add_confirmed:
                    return
                sent, fut = self.clock(), rh.read_new_entries_async(self.read_upto, 0.5,
                                                                    self.batch)
            entries = fut.result(30)
            now = self.clock()
            if not entries:
                continue
            first, last = entries[0].entry_id, entries[-1].entry_id
            stamps = np.frombuffer(b"".join([e.data[:8] for e in entries]), dtype="<i8")
            with self.lock:
                self.meter.record(now - sent, len(entries), len(entries) * self.entry_bytes)
                self.e2e.record_many(np.maximum(now - stamps, 0))
            self.reads.append((first, last, now))
            self.read_upto = last
            asked_upto = max(asked_upto, last)
        raise BenchError(f"tailing ledger {rh.ledger_id} did not reach its end in time "
                         f"(read up to {self.read_upto})")


def _tail_writer(conn, metadata_uri: str, params: dict) -> None:
    """Child process: create the ledgers, wait for "go", write them at full speed for the run's
    time with each payload stamped with its issue time, close them, report."""
    try:
        bk = open_client(metadata_uri, params["throttle"], params["timeout"],
                     params.get("client_keys"), explicitLacInterval=params.get("explicit_lac", 100))
        try:
            handles = [bk.create_ledger(params["ensemble"], params["quorum"],
                                        params["ack_quorum"], params["digest"],
                                        params["password"].encode())
                       for _ in range(params["listen"])]
            conn.send(("ledgers", [h.ledger_id for h in handles]))
            if not conn.poll(params["timeout"]) or conn.recv() != "go":
                return
            filler = payload_bytes(max(params["entrysize"] - 8, 0))
            meter = Meter("writer", unit="adds")
            load = AddLoad(handles, lambda t: t.to_bytes(8, "little") + filler,
                           params["throttle"], params.get("rate"), None, meter,
                           nbytes=8 + len(filler), track_acks=True)
            load.run(params["time"], params["timeout"])
            figures = meter.finish(load.clock())
            acks = []
            for ranges in load.acks:  # -> ack time by entry id
                r = np.asarray(ranges, dtype=np.int64).reshape(-1, 3)
                ack_ns = np.zeros(int(r[:, 1].max()) + 1 if len(r) else 0, dtype=np.int64)
                for first, last, t in r.tolist():
                    ack_ns[first:last + 1] = t
                acks.append(ack_ns)
            for h in handles:
                h.close()
        finally:
            bk.close()
        conn.send(("done", (figures, acks)))
    except BaseException as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))


def read_tail(bk, metadata_uri: str, params: dict, emit) -> dict:
    """Start the writer process, tail its ledgers until they are closed and read to the end.

    Returns:
        the phases {"tail": reader figures + lag_ms + written, "writer": writer figures} and
        the ledger ids.
    """
    if params["entrysize"] < 8:
        raise BenchError("--entrysize must be at least 8 with --listen (entries carry a time)")
    ctx = multiprocessing.get_context("spawn")  # no ZeroMQ context or LMDB env crosses a fork
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_tail_writer, args=(child, metadata_uri, params),
                       name="bookie-bench-writer", daemon=True)
    proc.start()
    timeout_s = params["timeout"]
    try:
        kind, value = _receive(parent, timeout_s, "the writer to create its ledgers")
        ledger_ids = value
        handles = [open_ledger(bk, lid, params) for lid in ledger_ids]
        meter = Meter("tail", unit="entries", emit=emit)
        e2e = Histogram()
        lock = threading.Lock()
        clock = time.monotonic_ns
        start = clock()
        meter.start(start)
        deadline = start + int((params["time"] + timeout_s) * NS_PER_S)
        readers = [TailReader(h, params["batch"], meter, e2e, lock, deadline,
                              window=params["window"], entry_bytes=params["entrysize"])
                   for h in handles]
        threads = [threading.Thread(target=r.run, daemon=True) for r in readers]
        parent.send("go")
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            threads[0].join(0.1) if threads[0].is_alive() else time.sleep(0.1)
            with lock:
                meter.tick(clock(), 0)
        for r in readers:
            if r.error is not None:
                raise BenchError(f"tailing ledger {r.rh.ledger_id}: {r.error}")
        with lock:
            figures = meter.finish(clock())
        kind, (writer, acks) = _receive(parent, timeout_s, "the writer to finish")
        figures["lag_ms"] = latency_figures(tail_lag(readers, acks))
        figures["e2e_ms"] = latency_figures(e2e)
        figures["written"] = writer["ops"]
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    return {"tail": figures, "writer": writer}, ledger_ids


def tail_lag(readers: list[TailReader], acks: list[np.ndarray]) -> Histogram:
    """Per entry: from the writer's client confirming it to the tailing reader holding it.

    Raises:
        BenchError: the reader and the writer disagree on how many entries there are.
    """
    lag = Histogram()
    for reader, ack_ns in zip(readers, acks):
        read_ns = reader.read_times()
        if len(read_ns) != len(ack_ns):
            raise BenchError(f"ledger {reader.rh.ledger_id}: the writer confirmed {len(ack_ns)} "
                             f"entries, the tailing reader read {len(read_ns)}")
        # An entry is readable only once confirmed, but the writer's callback may run a hair
        # after a reader got it: such a lag is 0, not negative.
        lag.record_many(np.maximum(read_ns - ack_ns, 0))
    return lag


def _receive(conn, timeout_s: float, what: str):
    if not conn.poll(timeout_s):
        raise BenchError(f"timed out after {timeout_s:g} s waiting for {what}")
    kind, value = conn.recv()
    if kind == "error":
        raise BenchError(f"the writer process failed: {value}")
    return kind, value
