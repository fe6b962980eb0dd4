"""``bookie bench writes`` and ``bookie bench reads``: adds and reads through the real client.

Theory of operation
-------------------
writes (BenchThroughputLatency): ``--ledgers`` ledgers are created with (E, Qw, Qa); the main
thread hands adds to the client in batches (``add_entries_callback``, the client's bulk path)
round-robin over them, keeping at most ``--throttle`` adds outstanding, for ``--time`` seconds
or ``--sendlimit`` adds.  The client reports each confirmed (or failed) range of entry ids
once; the callback notes (range, completion time) into a deque from the client's thread, and
the main thread drains it into the histogram a batch at a time (numpy): every add gets its
own latency, from its issue time to the completion of the range holding it.  With ``--rate``
adds are issued on a fixed schedule and latency counts from each add's intended time (open
loop).  ``--warmup-messages`` adds go first and are not counted.

reads (BenchReadThroughputLatency):
- sequential: read a closed ledger from entry 0 to its last entry, ``--batch`` entries per
  ``read_entries`` call; every entry gets its call's latency.  Without ``--ledger`` the tool
  first writes ``--entries`` entries to a fresh ledger and closes it.
- tail (``--listen N``): following live writers, in ``tail_bench``.

``AddLoad`` is the writes loop with the client passed in, so the tests drive it with a fake.
"""

from __future__ import annotations

import collections
import threading
import time

import numpy as np

from bookie.bench.report import NS_PER_S, Meter

_DRAIN_MAX = 65536  # completions drained into the histogram at once (at most)
_ISSUE_CHUNK = 256  # adds handed to the client at once (at most)
_PACE_S = 0.001  # with --rate: shortest sleep between slices of adds


class BenchError(RuntimeError):
    """The run cannot go on; one clear line."""


def payload_bytes(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


class _Batch:
    """The add callback of one hand-over: notes each confirmed or failed range with its time.

    Runs on the client's I/O thread: one clock read, one deque append, one event set per
    range (never per entry)."""

    __slots__ = ("load", "index", "times", "base", "count", "reported")

    def __init__(self, load: "AddLoad", index: int, times, count: int):
        self.load, self.index, self.times, self.count = load, index, times, count
        self.base = None  # entry id of the batch's first add, from the first report
        self.reported = 0

    def __call__(self, first: int, last: int, error) -> None:
        if first < 0:  # refused before ids were given: the whole rest of the batch
            n = self.count - self.reported
        else:
            if self.base is None:
                self.base = first
            n = last - first + 1
        self.reported += n
        load = self.load
        load.done.append((self, first, last, n, load.clock(), error))
        load.reported += n
        load.wakeup.set()


class AddLoad:
    """Adds through ledger handles, at most ``throttle`` outstanding (see the module doc).

    Args:
        handles: ledger handles with ``add_entries_callback(payloads, callback)`` (the
            client's bulk path: one hand-over per batch, one callback per confirmed range).
        make_payload: called with the issue time (ns) for each add; returns the entry's data.
        throttle: adds outstanding at most.
        rate: adds per second offered (None: as fast as the throttle allows).
        limit: adds at most (None: only the time limits).
        meter: receives the completions.
        keep_latencies: keep every latency (for ``--latency-file``).
        track_acks: keep (first, last, ack time) of every confirmed range, per ledger.
    """

    def __init__(self, handles, make_payload, throttle: int, rate: float | None,
                 limit: int | None, meter: Meter | None, *, nbytes: int,
                 keep_latencies: bool = False, track_acks: bool = False,
                 clock=time.monotonic_ns):
        self.handles = list(handles)
        self.make_payload = make_payload
        self.throttle = throttle
        self.interval_ns = NS_PER_S / rate if rate else 0.0
        self.limit = limit
        self.meter = meter
        self.nbytes = nbytes
        self.clock = clock
        self.keep = [] if keep_latencies else None
        # per ledger: (first, last, ack time) of every confirmed range, for tail lag
        self.acks = [[] for _ in self.handles] if track_acks else None
        self.done: collections.deque = collections.deque()
        self.wakeup = threading.Event()
        self.issued = 0
        self.reported = 0  # adds whose outcome the client reported (written by its thread)
        self.completed = 0  # adds drained into the figures
        self.failed = 0
        self.first_error: BaseException | None = None

    def _drain(self) -> None:
        done = self.done
        n = min(len(done), _DRAIN_MAX)
        if not n:
            return
        ok_lat = []
        ok = errors = 0
        for _ in range(n):
            batch, first, last, count, end, error = done.popleft()
            self.completed += count
            if error is not None:
                errors += count
                if self.first_error is None:
                    self.first_error = error
                continue
            ok += count
            times = batch.times
            if isinstance(times, int):
                ok_lat.append(np.full(count, end - times, dtype=np.int64))
            else:
                lo = first - batch.base
                ok_lat.append(end - times[lo:lo + count])
            if self.acks is not None:
                self.acks[batch.index].append((first, last, end))
        if errors:
            self.failed += errors
        if self.meter is not None:
            if ok:
                lat = np.concatenate(ok_lat) if len(ok_lat) > 1 else ok_lat[0]
                self.meter.record_many(lat, ok * self.nbytes)
                if self.keep is not None:
                    self.keep.append(lat)
            if errors:
                self.meter.record_error(errors)

    def _issue(self, count: int, start: int, now: int) -> None:
        """Issue ``count`` adds, round-robin over the ledgers from add number ``self.issued``,
        one hand-over per ledger."""
        nh = len(self.handles)
        for j in range(min(nh, count)):
            numbers = range(self.issued + j, self.issued + count, nh)
            index = numbers[0] % nh  # the same ledger for all these numbers
            if self.interval_ns:
                times = np.array([start + int(n * self.interval_ns) for n in numbers],
                                 dtype=np.int64)
                payloads = [self.make_payload(t) for t in times.tolist()]
            else:
                times = now
                payloads = [self.make_payload(now) for _ in numbers]
            self.handles[index].add_entries_callback(
                payloads, _Batch(self, index, times, len(payloads)))
        self.issued += count

    def run(self, duration_s: float | None, timeout_s: float) -> None:
        """Issue adds until the time or limit is spent, then wait for every answer.

        Raises:
            BenchError: no add completed for ``timeout_s``.
        """
        start = self.clock()
        end = start + int(duration_s * NS_PER_S) if duration_s else None
        if self.meter is not None:
            self.meter.start(start)
        last_progress = start
        seen_completed = 0
        while True:
            # Figures first: the completions that woke this thread go into the histogram
            # before the next adds are handed over, so that this bookkeeping never holds the
            # GIL while the client's I/O thread has an add to send.  (Done after the hand-over,
            # it was in every add's latency: one add at a time measured 0.7 ms more than the
            # client takes.)
            self._drain()
            now = self.clock()
            if self.completed != seen_completed:
                seen_completed, last_progress = self.completed, now
            elif now - last_progress > timeout_s * NS_PER_S:
                raise BenchError(f"no add completed within {timeout_s:g} s "
                                 f"({self.issued - self.completed} outstanding)")
            if self.meter is not None and now >= self.meter.next_tick_ns:
                self.meter.tick(now, self.issued - self.completed)
            stopping = (end is not None and now >= end) or \
                       (self.limit is not None and self.issued >= self.limit)
            if stopping and self.issued == self.reported:
                break
            # Issue as many as the throttle and the schedule allow, a chunk at a time.
            while not stopping:
                room = self.throttle - (self.issued - self.reported)
                if self.limit is not None:
                    room = min(room, self.limit - self.issued)
                if self.interval_ns:
                    room = min(room, int((now - start) / self.interval_ns) + 1 - self.issued)
                if room <= 0:
                    break
                self._issue(min(room, _ISSUE_CHUNK), start, now)
                now = self.clock()
                if end is not None and now >= end:
                    break
            # Sleep only when there is nothing to do: the window is full, the run is draining,
            # or (paced) the next add is not due yet.  A completion wakes us at once.
            self.wakeup.clear()  # before looking, so a completion after the look still wakes
            if self.done:
                continue
            if stopping or self.issued - self.reported >= self.throttle:
                self.wakeup.wait(0.05)
            elif self.interval_ns:
                # Paced: sleep at least _PACE_S, so adds go out in slices of that much time
                # (50 adds at 50,000/s) rather than one hand-over, wake-up and ADD message per
                # add; each still counts its latency from its own intended time.
                due = start + int(self.issued * self.interval_ns)
                self.wakeup.wait(min(max((due - now) / NS_PER_S, _PACE_S), 0.05))
        self._drain()

    def latencies(self) -> np.ndarray:
        return np.concatenate(self.keep) if self.keep else np.zeros(0, dtype=np.int64)


def _client(metadata_uri: str, throttle: int, timeout_s: float, client_keys: dict | None = None,
            **keys):
    """A client whose own throttle is the bench's, so adding never blocks on it.
    ``client_keys``: the operator's (``--client-conf`` / ``--set``); the bench's own keys
    (``keys``, throttle, operationTimeout) come from its options and win."""
    from bookie.client import BookKeeper, BookKeeperError
    try:
        return BookKeeper(metadata_uri, client_keys, throttle=throttle,
                          operationTimeout=timeout_s, **keys)
    except BookKeeperError as e:
        raise BenchError(f"cannot open the client on {metadata_uri}: {e}") from None


def run_writes(params: dict, metadata_uri: str, *, emit=None, data_dir: str | None = None) -> dict:
    """The whole ``bench writes`` run.  Returns the result dict (see bench/README.md)."""
    from bookie.bench.report import build_result, host_info, now_iso
    started = now_iso()
    host = host_info(data_dir)
    ack_quorum = params["ack_quorum"] or params["quorum"]
    payload = payload_bytes(params["entrysize"])
    from bookie.client import BookKeeperError
    bk = _client(metadata_uri, params["throttle"], params["timeout"], params.get("client_keys"))
    handles = []
    try:
        for _ in range(params["ledgers"]):
            try:
                handles.append(bk.create_ledger(params["ensemble"], params["quorum"], ack_quorum,
                                                params["digest"], params["password"].encode()))
            except BookKeeperError as e:
                raise BenchError(f"cannot create a ledger: {e}") from None
        if params["warmup_messages"]:
            AddLoad(handles, lambda t: payload, params["throttle"], None,
                    params["warmup_messages"], None, nbytes=len(payload)).run(None, params["timeout"])
        meter = Meter("writes", unit="adds", emit=emit)
        load = AddLoad(handles, lambda t: payload, params["throttle"], params["rate"],
                       params["sendlimit"], meter, nbytes=len(payload),
                       keep_latencies=bool(params["latency_file"]))
        load.run(params["time"], params["timeout"])
        figures = meter.finish(load.clock())
        figures["ledgers"] = [h.ledger_id for h in handles]
        if load.first_error is not None:
            figures["first_error"] = f"{type(load.first_error).__name__}: {load.first_error}"
        for h in handles:
            h.close()
    finally:
        bk.close()
    if params["latency_file"]:
        with open(params["latency_file"], "w", encoding="ascii") as f:
            lat_us = load.latencies() // 1000
            f.write("\n".join(map(str, lat_us.tolist())))
            f.write("\n" if len(lat_us) else "")
    from bookie import wire
    entry_bytes = wire.ENTRY_HEADER_SIZE + wire.DIGEST_SIZES[params["digest"]] + len(payload)
    return build_result("writes", dict(params, ack_quorum=ack_quorum, metadata=metadata_uri),
                        {"writes": figures}, host=host, started=started,
                        figures={"entry_bytes": entry_bytes})


# -- reads ---------------------------------------------------------------------------------------


def _open(bk, ledger_id: int, params: dict):
    from bookie.client import BookKeeperError
    try:
        return bk.open_ledger(ledger_id, params["digest"], params["password"].encode(),
                              recovery=False)
    except BookKeeperError as e:
        raise BenchError(f"cannot open ledger {ledger_id}: {e}") from None


def _write_ledger(bk, params: dict, count: int, timeout_s: float) -> int:
    """A fresh ledger of ``count`` entries, closed.  Returns its id."""
    from bookie.client import BookKeeperError
    try:
        lh = bk.create_ledger(params["ensemble"], params["quorum"], params["ack_quorum"],
                              params["digest"], params["password"].encode())
        payload = payload_bytes(params["entrysize"])
        load = AddLoad([lh], lambda t: payload, params["throttle"], None, count, None,
                       nbytes=len(payload))
        load.run(None, timeout_s)
        if load.failed:
            raise BenchError(f"writing the ledger to read failed: {load.first_error}")
        lh.close()
    except BookKeeperError as e:
        raise BenchError(f"cannot write a ledger to read: {e}") from None
    return lh.ledger_id


def read_sequential(rh, batch: int, window: int, duration_s: float, timeout_s: float,
                    meter: Meter, clock=time.monotonic_ns, *, at_entries: int | None = None,
                    on_reach=None) -> dict:
    """Read ``rh`` from entry 0 to its last-add-confirmed, ``batch`` entries per call and
    ``window`` calls in flight, or until ``duration_s`` is spent.  ``on_reach()`` is called
    once, as soon as ``at_entries`` entries have been read."""
    last = rh.read_last_add_confirmed()
    if last < 0:
        raise BenchError(f"ledger {rh.ledger_id} has no entries to read")
    start = clock()
    meter.start(start)
    end = start + int(duration_s * NS_PER_S)
    in_flight: collections.deque = collections.deque()
    next_entry = 0
    read = 0
    if on_reach is not None and at_entries is not None and at_entries <= 0:
        on_reach()
        on_reach = None
    while True:
        now = clock()
        while len(in_flight) < window and next_entry <= last and now < end:
            hi = min(last, next_entry + batch - 1)
            in_flight.append((now, rh.read_entries_async(next_entry, hi)))
            next_entry = hi + 1
        if not in_flight:
            break
        sent, fut = in_flight.popleft()
        try:
            entries = fut.result(timeout_s)
        except TimeoutError:
            raise BenchError(f"a read of ledger {rh.ledger_id} took over {timeout_s:g} s") from None
        now = clock()
        meter.record(now - sent, len(entries), sum(len(e.data) for e in entries))
        read += len(entries)
        if on_reach is not None and read >= at_entries:
            on_reach()
            on_reach = None
        if now >= meter.next_tick_ns:
            meter.tick(now, sum(1 for _ in in_flight))
    figures = meter.finish(clock())
    figures["last_entry_id"] = last
    return figures


def read_losing_a_replica(rh, params: dict, pause_bookie, emit) -> tuple[dict, str]:
    """``read_sequential`` again, SIGSTOPping (``pause_bookie``) the first bookie of the ledger's
    ensemble once ``lose_replica_at`` entries are read; it is resumed after the phase.

    Returns:
        the phase's figures and the bookie stopped.
    """
    victim = rh.metadata.fragments[0][1][0]
    resume = []

    def lose() -> None:
        resume.append(pause_bookie(victim))
        if emit is not None:
            emit(f"[lost_replica] bookie {victim} stopped (SIGSTOP) after "
                 f"{params['lose_replica_at']} entries")
    try:
        figures = read_sequential(rh, params["batch"], params["window"], params["time"],
                                  params["timeout"], Meter("lost_replica", unit="entries",
                                                           emit=emit),
                                  at_entries=params["lose_replica_at"], on_reach=lose)
    finally:
        for r in resume:
            r()
    return figures, victim


def run_reads(params: dict, metadata_uri: str, *, emit=None, data_dir: str | None = None,
              pause_bookie=None) -> dict:
    """The whole ``bench reads`` run.  Returns the result dict (see bench/README.md).

    Args:
        pause_bookie: with ``lose_replica_at``: bookie id -> stop it; returns what resumes it.
    """
    from bookie.bench.report import build_result, host_info, now_iso
    started = now_iso()
    host = host_info(data_dir)
    params = dict(params, ack_quorum=params["ack_quorum"] or params["quorum"],
                  metadata=metadata_uri)
    bk = _client(metadata_uri, params["throttle"], params["timeout"], params.get("client_keys"))
    figures: dict = {}
    try:
        if params["listen"]:
            from bookie.bench.tail_bench import read_tail
            phases, ledger_ids = read_tail(bk, metadata_uri, params, emit)
        else:
            ledger_id = params["ledger"]
            if ledger_id is None:
                ledger_id = _write_ledger(bk, params, params["entries"], params["timeout"])
            rh = _open(bk, ledger_id, params)
            phases = {"sequential": read_sequential(
                rh, params["batch"], params["window"], params["time"], params["timeout"],
                Meter("sequential", unit="entries", emit=emit))}
            ledger_ids = [ledger_id]
            if params.get("lose_replica_at") is not None:
                lost, victim = read_losing_a_replica(rh, params, pause_bookie, emit)
                phases["lost_replica"] = lost
                figures["lost_bookie"] = victim
                healthy = phases["sequential"]["ops_per_s"]
                figures["lost_replica_ratio"] = lost["ops_per_s"] / healthy if healthy else 0.0
    finally:
        bk.close()
    return build_result("reads", params, phases, host=host, started=started,
                        figures={"ledgers": ledger_ids, **figures})
