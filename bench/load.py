"""The client load of the benchmarks: ``AddLoad`` (the writes loop, with the client passed in, so
the tests drive it with a fake), the client it runs on (``open_client``), a ledger opened for
reading (``open_ledger``), the payload and ``BenchError``; ``client_bench`` (writes, reads),
``tail_bench`` and ``trace`` use them."""

from __future__ import annotations

import collections
import threading
import time

import numpy as np

from bookie.bench.report import NS_PER_S, Meter
from bookie.client import BookKeeperError

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


def open_client(metadata_uri: str, throttle: int, timeout_s: float, client_keys: dict | None = None,
            **keys):
    """A client whose own throttle is the bench's, so adding never blocks on it.
    ``client_keys``: the operator's (``--client-conf`` / ``--set``); the bench's own keys
    (``keys``, throttle, operationTimeout) come from its options and win."""
    from bookie.client import BookKeeper, BookKeeperError  # lazy: asyncio
    try:
        return BookKeeper(metadata_uri, client_keys, throttle=throttle,
                          operationTimeout=timeout_s, **keys)
    except BookKeeperError as e:
        raise BenchError(f"cannot open the client on {metadata_uri}: {e}") from None


def open_ledger(bk, ledger_id: int, params: dict):
    try:
        return bk.open_ledger(ledger_id, params["digest"], params["password"].encode(),
                              recovery=False)
    except BookKeeperError as e:
        raise BenchError(f"cannot open ledger {ledger_id}: {e}") from None
