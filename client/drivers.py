"""Drivers: running the protocol operations on the client's I/O thread, and handing their
results to callers through futures and add callbacks.

Theory of operation
-------------------
``OpRunner`` is the one object the client and its ledger handles use to run protocol work; it
owns no protocol state.  It starts an operation (a reader's read, a LAC read, a recovery) in an
``OpDriver`` whose Future gets the operation's result, and a ledger's writer in a
``WriterDriver`` that reports confirmed / failed ranges of entries to the callbacks of the
batches they belong to.  Every driver carries its ledger id and master key: the I/O thread
needs no table of ledgers, so nothing a caller does to one ledger (deleting it, say) can break
the requests of another.

Threads: ``OpRunner``'s methods are called from any thread; the drivers' methods run on the
I/O thread only (the runner submits them there).  A caller that stops waiting cancels its
Future, and a cancelled operation is over at once: it sends nothing more.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from concurrent.futures import Future

from bookie import wire
from bookie.client.errors import BKTimeoutError, BookKeeperError, ClientClosedError
from bookie.client.io import Driver, IOThread
from bookie.client.protocol import actions as A
from bookie.client.protocol.reader import Deliver
from bookie.client.protocol.writer import LedgerWriter

ADD_CHUNK = 8192  # most entries handed to the I/O thread (and throttled) at once

log = logging.getLogger("bookie.client")


def resolve(f: Future, value) -> None:
    """Complete ``f`` with ``value`` unless it is done or cancelled already."""
    if not f.done() and f.set_running_or_notify_cancel():
        f.set_result(value)


def fail(f: Future, error: BaseException) -> None:
    """Complete ``f`` with ``error`` unless it is done or cancelled already."""
    if not f.done() and f.set_running_or_notify_cancel():
        f.set_exception(error)


class Throttle:
    """Bounds the adds outstanding in one client; taken and given back many at a time.

    A ``BoundedSemaphore`` costs a lock round trip per entry on both the issuing thread and the
    I/O thread; this counter costs one per batch handed over and one per confirmed range.
    """

    __slots__ = ("limit", "_free", "_cond", "_waiting")

    def __init__(self, limit: int):
        self.limit = limit
        self._free = limit
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0

    @property
    def available(self) -> int:
        """Adds that may be handed over now without waiting (a racy peek)."""
        return self._free

    def acquire(self, n: int, timeout_s: float) -> bool:
        """Take ``n`` (<= limit) slots, waiting up to ``timeout_s``; False when time ran out."""
        with self._cond:
            if self._free >= n:
                self._free -= n
                return True
            deadline = time.monotonic() + timeout_s
            self._waiting += 1
            try:
                while self._free < n:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            self._free -= n
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self._free += n
            if self._waiting:
                self._cond.notify_all()


# ---- add callbacks ------------------------------------------------------------------------------

def call_back(callback, first: int, last: int, error) -> None:
    """Run a user's add callback; what it raises is logged, never propagated."""
    try:
        callback(first, last, error)
    except Exception:  # noqa: BLE001 - a user's callback must not stop the client
        log.exception("error in an add callback")


class RangeWaiter:
    """An add callback completing one Future with ``range(first, last + 1)`` of the whole
    batch once its last entry is confirmed, or with the first error."""

    __slots__ = ("future", "count", "first", "seen")

    def __init__(self, future: Future, count: int):
        self.future, self.count, self.first, self.seen = future, count, None, 0

    def __call__(self, first: int, last: int, error) -> None:
        if error is not None:
            fail(self.future, error)
            return
        if self.first is None:
            self.first = first
        self.seen += last - first + 1
        if self.seen >= self.count:
            resolve(self.future, range(self.first, last + 1))


class FirstIdWaiter:
    """An add callback completing one Future with the entry id of a one-entry batch."""

    __slots__ = ("future",)

    def __init__(self, future: Future):
        self.future = future

    def __call__(self, first: int, last: int, error) -> None:
        if error is not None:
            fail(self.future, error)
        else:
            resolve(self.future, first)


class EachWaiter:
    """An add callback completing one Future per entry (the ``add_entries_async`` shape)."""

    __slots__ = ("futures", "next")

    def __init__(self, futures: list[Future]):
        self.futures, self.next = futures, 0

    def __call__(self, first: int, last: int, error) -> None:
        futures, i = self.futures, self.next
        if error is not None and first < 0:  # refused before ids were given: all the rest
            for f in futures[i:]:
                fail(f, error)
            self.next = len(futures)
            return
        for entry_id in range(first, last + 1):
            if error is None:
                resolve(futures[i], entry_id)
            else:
                fail(futures[i], error)
            i += 1
        self.next = i


# ---- drivers ------------------------------------------------------------------------------------

class OpDriver(Driver):
    """Runs one finite operation; its Future gets the result (or the entries it delivered).

    An operation with a ``tick_s`` above 0 (a read with speculative reads) starts with the time
    and gets a Tick every ``tick_s`` until it is over."""

    def __init__(self, io: IOThread, op, ledger_id: int, master_key: bytes, future: Future,
                 collect: bool):
        super().__init__(io, op, ledger_id, master_key)
        self.future = future
        self.entries: list | None = [] if collect else None
        self.tick_s = getattr(op, "tick_s", 0.0)

    def begin(self) -> None:
        if self.tick_s > 0:
            self.start(self.op.start(time.monotonic()))
            if not self.over:
                self.io.later(self.tick_s, self._tick, self)
        else:
            self.start(self.op.start())

    def _tick(self) -> None:
        self.event(A.Tick())
        if not self.over:
            self.io.later(self.tick_s, self._tick, self)

    def output(self, a) -> None:
        if isinstance(a, Deliver):
            self.entries.extend(a.entries)
        elif isinstance(a, A.Finished):
            self.io.end(self)
            if a.error is not None:
                fail(self.future, a.error)
            else:
                resolve(self.future, self.entries if self.entries is not None else a.result)

    def abort(self, error) -> None:
        fail(self.future, error)


class WriterDriver(Driver):
    """Runs a LedgerWriter: reports confirmed / failed ranges of entries to the callbacks of
    the batches they belong to, in entry order, and completes the close futures.

    ``batches`` holds ``[first, last, callback]`` per batch handed over, in entry-id order;
    a Confirm(first, last) calls each overlapped batch's callback once with its part of the
    range, so the cost is per range and per batch, never per entry.
    """

    def __init__(self, io: IOThread, writer: LedgerWriter, master_key: bytes,
                 throttle: Throttle, tick_s: float):
        super().__init__(io, writer, writer.ledger_id, master_key)
        if writer.deferred_sync:
            self.add_flags = int(wire.Flag.DEFERRED_SYNC)
        self.batches: collections.deque[list] = collections.deque()
        self.close_futures: list[Future] = []
        self.force_futures: collections.deque[Future] = collections.deque()  # in force order
        self.throttle = throttle
        self.tick_s = tick_s
        if tick_s > 0:
            io.later(tick_s, self._tick, self)

    # read from any thread (plain attribute reads of the writer)
    @property
    def lac(self) -> int:
        return self.op.lac

    @property
    def info(self):
        return self.op.info

    @property
    def confirmed_length(self) -> int:
        return self.op.confirmed_length

    # -- on the I/O thread ---------------------------------------------------------------------

    def add(self, payloads, callback) -> None:
        try:
            first, actions = self.op.add(payloads, time.monotonic())
        except BookKeeperError as exc:
            self.throttle.release(len(payloads))
            call_back(callback, -1, -1, exc)
            return
        self.batches.append([first, first + len(payloads) - 1, callback])
        self.io.execute(self, actions)

    def close(self, future: Future) -> None:
        self.close_futures.append(future)
        self.io.execute(self, self.op.close(time.monotonic()))

    def force(self, future: Future) -> None:
        self.force_futures.append(future)
        self.io.execute(self, self.op.force(time.monotonic()))

    def end_with(self, error: BookKeeperError) -> None:
        """The ledger went away under the writer (deleted by this client): pending adds fail
        with ``error``, and so do later adds and the close."""
        self.io.execute(self, self.op.abort(error, time.monotonic()))

    def _tick(self) -> None:
        if self.op.state in ("writing", "closing"):
            self.event(A.Tick())
            self.io.later(self.tick_s, self._tick, self)

    def output(self, a) -> None:
        kind = type(a)
        if kind is A.Confirm:
            self._complete(a.first, a.last, None)
        elif kind is A.FailAdds:
            self._complete(a.first, a.last, a.error)
        elif kind is A.Forced:
            if self.force_futures:
                f = self.force_futures.popleft()
                if a.error is not None:
                    fail(f, a.error)
                else:
                    resolve(f, a.last)
        elif kind is A.Finished:
            futures, self.close_futures = self.close_futures, []
            for f in futures:
                if a.error is not None:
                    fail(f, a.error)
                else:
                    resolve(f, a.result)
            if self.op.state == "closed":
                self.io.unregister(self)

    def _complete(self, first: int, last: int, error) -> None:
        self.throttle.release(last - first + 1)
        batches = self.batches
        while batches:
            batch = batches[0]
            lo, hi = batch[0], batch[1]
            if lo > last:
                break
            if hi <= last:
                batches.popleft()
                call_back(batch[2], lo, hi, error)
            else:
                batch[0] = last + 1
                call_back(batch[2], lo, last, error)
                break

    def abort(self, error) -> None:
        while self.batches:
            lo, hi, callback = self.batches.popleft()
            self.throttle.release(hi - lo + 1)
            call_back(callback, lo, hi, error)
        for f in self.close_futures:
            fail(f, error)
        while self.force_futures:
            fail(self.force_futures.popleft(), error)


# ---- the runner ---------------------------------------------------------------------------------

class OpRunner:
    """Starts operations and writers on the I/O thread and waits for them (from any thread).

    Args:
        operation_timeout_s: how long ``wait`` waits by default (``operationTimeout``).
        speculative_read_timeout_s: ``speculativeReadTimeout`` in seconds, for the reads that
            ledger handles start (0: none).
    """

    def __init__(self, io: IOThread, throttle: Throttle, operation_timeout_s: float,
                 speculative_read_timeout_s: float = 0.0):
        self.io = io
        self.throttle = throttle
        self.operation_timeout_s = operation_timeout_s
        # speculativeReadTimeout: a READ unanswered this long is asked of the next replica
        self.speculative_read_timeout_s = speculative_read_timeout_s
        self.metrics = None  # the client's ClientMetrics (bookie.client.metrics), when on

    def run(self, op, ledger_id: int, master_key: bytes, collect: bool = False, key_flags: int = 0) -> Future:
        """Start ``op``; a Future of its result (with ``collect``, of the entries it delivered).
        Cancelling the Future ends the operation: it sends nothing more.  ``key_flags``: sent
        with its fences and recovery adds (RECOVERY_CREDENTIAL: ``master_key`` is that)."""
        fut: Future = Future()
        if self.metrics is not None:
            self.metrics.watch(op, fut)

        def start():
            if fut.cancelled():
                return  # the caller gave up before the operation began
            driver = OpDriver(self.io, op, ledger_id, master_key, fut, collect)
            driver.key_flags = key_flags
            self.io.register(driver)
            fut.add_done_callback(lambda f: f.cancelled() and self._cancel(driver))
            self.io.run_for(driver, driver.begin)
        self.io.submit(start)
        return fut

    def _cancel(self, driver: OpDriver) -> None:
        try:
            self.io.submit(self.io.end, driver)
        except ClientClosedError:
            pass  # the I/O thread ended every operation already

    def start_writer(self, writer: LedgerWriter, master_key: bytes,
                     tick_s: float) -> WriterDriver:
        """Register a writer on the I/O thread; its driver, once it runs there."""
        def start():
            driver = WriterDriver(self.io, writer, master_key, self.throttle, tick_s)
            self.io.register(driver)
            return driver
        return self.wait(self.io.call(start))

    def hand_over(self, driver: WriterDriver, payloads: list, callback) -> None:
        """Give ``payloads`` (checked, bytes) to the writer in parts of at most ADD_CHUNK (and
        the throttle's limit), each part once the throttle has room for it.

        Raises:
            BKTimeoutError: no room for ``operation_timeout_s`` (parts handed over before are
                added and reported).  ClientClosedError.
        """
        throttle, timeout_s = self.throttle, self.operation_timeout_s
        chunk = max(1, min(ADD_CHUNK, throttle.limit))
        for start in range(0, len(payloads), chunk):
            part = payloads[start:start + chunk] if len(payloads) > chunk else payloads
            if not throttle.acquire(len(part), timeout_s):
                raise BKTimeoutError(
                    f"ledger {driver.ledger_id}: {throttle.limit} adds outstanding for "
                    f"{timeout_s} s (throttle); bookies too slow or down",
                    ledger_id=driver.ledger_id)
            try:
                self.io.submit_to(driver, driver.add, part, callback)
            except ClientClosedError:
                throttle.release(len(part))
                raise

    def close_writer(self, driver: WriterDriver) -> Future:
        """Close the writer's ledger; a Future of the closed LedgerInfo."""
        fut: Future = Future()
        self.io.submit_to(driver, driver.close, fut)
        return fut

    def force_writer(self, driver: WriterDriver) -> Future:
        """A Future of the last entry id a force of the writer covers, once every entry added
        before it is acknowledged and (deferred sync) the LAC moved there."""
        fut: Future = Future()
        self.io.submit_to(driver, driver.force, fut)
        return fut

    def end_writer(self, driver: WriterDriver, error: BookKeeperError) -> None:
        """Fail the writer's pending and later adds with ``error`` (its ledger is gone)."""
        try:
            self.io.submit_to(driver, driver.end_with, error)
        except ClientClosedError:
            pass

    def wait(self, fut: Future, timeout_s: float | None = None):
        """The Future's result, waiting up to ``timeout_s`` (default: operationTimeout).

        Raises:
            BKTimeoutError: it did not complete in time; the Future is cancelled (an operation
                behind it stops; an add already sent may still complete).
            the operation's own error.
        """
        timeout_s = self.operation_timeout_s if timeout_s is None else timeout_s
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if not fut.cancel() and fut.done():
                return fut.result()  # it completed just now
            raise BKTimeoutError(f"operation did not complete within {timeout_s} s "
                                 f"(operationTimeout); are the bookies up?") from None

    def suspect_bookies(self) -> frozenset:
        """Bookies that failed to answer lately (reads try them last)."""
        return self.io.suspect_bookies()
