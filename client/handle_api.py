"""The rest of BookKeeper's handle API over ``bookie.client.handle.LedgerHandle``.

``LedgerHandle`` here is what ``BookKeeper.create_ledger`` and ``open_ledger`` return: the
handle of ``bookie.client.handle`` plus BookKeeper's ``ReadHandle`` / ``WriteHandle`` calls that
it lacks, and the timing of adds for the client's metrics (``bookie.client.metrics``) when they
are on:

- ``read_unconfirmed_entries(first, last)``: entries past the last-add-confirmed too, as far as
  the bookies hold them (BookKeeper's ``readUnconfirmed``);
- ``try_read_last_add_confirmed()``: the first bookie's LAC, no quorum waited for (BookKeeper's
  ``tryReadLastAddConfirmed``); the handle keeps it if it is higher;
- ``last_add_pushed``: the highest entry id handed to the bookies (the writer's), or the LAC;
- ``force()``: the writer's; waits for every entry added so far, and with deferred sync
  (``create_ledger(write_flags=["deferred_sync"])``) advances the LAC over them.

``LedgerHandleAdv`` (from ``BookKeeper.create_ledger_adv``) takes the entry id from its caller:
``add_entry(entry_id, data)``.  Ids may come out of order within the client's window (its
``throttle``), each at most once.  Theory of operation: the handle keeps the entries that
arrive ahead of the next id missing; whenever the id just after the contiguous prefix arrives,
it and every held entry that follows it are handed to the ordinary writer, in order.  So the
LAC advances over the contiguous prefix only (an entry past a gap is neither confirmed nor
sent until the gap is filled), every entry carries the ledger length of the entries before it,
and an ``add_entry`` returns its id once the entry and every earlier one are acknowledged, as
BookKeeper's callbacks complete in entry order.  Unlike BookKeeper, an entry past a gap is not
sent to the bookies before the gap is filled; no caller can tell but by reading unconfirmed
entries.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Iterator

from bookie.client import handle
from bookie.client.digest import LedgerEntry
from bookie.client.drivers import fail, resolve
from bookie.client.errors import InvalidArgumentError, LedgerClosedError
from bookie.client.handle_verify import VerifiableHandle
from bookie.client.protocol.lac import FirstLacOp
from bookie.client.protocol.ledger import LedgerState
from bookie.client.protocol.writer import WRITING


class LedgerHandle(VerifiableHandle, handle.LedgerHandle):
    """An open ledger (see ``bookie.client.handle.LedgerHandle``) with BookKeeper's further
    calls, and a verifiable ledger's root and proofs (``bookie.client.handle_verify``).  ``metrics``: the client's ``ClientMetrics``, or None when they are off."""

    def __init__(self, *args, metrics=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._metrics = metrics

    @property
    def last_add_pushed(self) -> int:
        """The writer's: the highest entry id handed to this handle's writer (confirmed or
        not), as soon as ``add_entry_async`` (or another ``add_*``) returned, as BookKeeper's
        ``getLastAddPushed``; a reader's: its last-add-confirmed."""
        if self._writer is not None:
            op = self._writer.op
            if op.state == WRITING:  # adds handed over may not have reached the I/O thread
                return max(self._handed, op.last_add_pushed)
            return op.last_add_pushed  # closed or failed: what the writer took, no more
        return self.last_add_confirmed

    def force(self, timeout_s: float | None = None) -> int:
        """Wait until every entry added so far is acknowledged (durable), then - for a ledger
        created with ``write_flags=["deferred_sync"]`` - advance the LAC over them; returns the
        last entry id covered (-1: none).  Forces complete in the order they were asked.

        Raises:
            LedgerClosedError: a reader's handle, or a handle closed already (BookKeeper's
                LedgerClosedException).  LedgerFencedError, NotEnoughBookiesError, ...: the
                writer failed before the entries were acknowledged.
        """
        return self._runner.wait(self.force_async(), timeout_s)

    def force_async(self) -> Future:
        """A Future of ``force``'s result."""
        return self._runner.force_writer(self._writer_driver())

    def read_unconfirmed_entries(self, first: int, last: int) -> Iterator[LedgerEntry]:
        """Entries ``first`` .. ``last`` in order, past the last-add-confirmed too: what the
        bookies of each entry's write set hold, confirmed or not (an entry no bookie holds
        yet raises NoSuchEntryError).  For readers that follow a writer closely and accept
        entries that a recovery may still cut off.

        Raises:
            InvalidArgumentError: an empty or negative range.  NoSuchEntryError,
            DigestMismatchError, BKTimeoutError: as ``read_entries``.
        """
        self._check_range(first, last)
        return self._iterate(first, last)

    def read_unconfirmed_entries_async(self, first: int, last: int) -> Future:
        """A Future of the list of entries ``first`` .. ``last`` (``read_unconfirmed_entries``)."""
        self._check_range(first, last)
        return self._read_op(first, last)

    def try_read_last_add_confirmed(self) -> int:
        """The LAC as the first bookie of the last fragment to answer has it (no quorum waited
        for); the handle keeps it when it is higher than the one it knows, and returns the
        handle's LAC.  A writer returns its own LAC, a closed ledger its last entry.

        Raises:
            LedgerRecoveryError: no bookie of the last fragment answered.  UnauthorizedError.
        """
        return self._runner.wait(self.try_read_last_add_confirmed_async())

    def try_read_last_add_confirmed_async(self) -> Future:
        """A Future of ``try_read_last_add_confirmed``'s result."""
        if self._writer is not None or self._info.state is LedgerState.CLOSED:
            done: Future = Future()
            done.set_result(self.last_add_confirmed)
            return done
        outer: Future = Future()
        inner = self._runner.run(FirstLacOp(self._info), self.ledger_id, self._master_key)

        def answered(f: Future) -> None:  # on the I/O thread
            if f.exception() is not None:
                fail(outer, f.exception())
                return
            self._lac = max(self._lac, f.result())
            resolve(outer, self._lac)
        inner.add_done_callback(answered)
        return outer

    # -- metrics -------------------------------------------------------------------------------

    def add_entries_callback(self, payloads, callback) -> None:
        if self._metrics is not None:
            callback = self._metrics.timed_adds(callback)
        super().add_entries_callback(payloads, callback)

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise InvalidArgumentError(f"bad entry range {first}..{last}",
                                       ledger_id=self.ledger_id)


class LedgerHandleAdv(LedgerHandle):
    """The writer's handle of a ledger from ``create_ledger_adv``: the caller gives each entry
    its id (see the module's theory of operation).  ``window``: how far past the next id
    missing an entry id may be (the client's throttle)."""

    def __init__(self, *args, window: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._window = window
        self._next_id = 0  # the lowest id not handed to the writer yet
        self._held: dict[int, tuple[bytes, Future]] = {}
        self._adv_lock = threading.Lock()

    def add_entry(self, entry_id, data=None, timeout_s: float | None = None) -> int:
        """Add ``data`` as entry ``entry_id``; returns ``entry_id`` once it and every entry
        before it are acknowledged by Qa bookies.

        Raises:
            InvalidArgumentError: no id given, an id added before, an id outside the window
                (more than ``throttle`` past the lowest id not added yet), a payload too large.
            LedgerClosedError, LedgerFencedError, NotEnoughBookiesError, BKTimeoutError, ...
        """
        return self._runner.wait(self.add_entry_async(entry_id, data), timeout_s)

    def add_entry_async(self, entry_id, data=None) -> Future:
        """``add_entry`` as a Future of the entry id."""
        if data is None or isinstance(entry_id, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(
                f"ledger {self.ledger_id} was created with create_ledger_adv: add_entry takes "
                f"the entry id first, add_entry(entry_id, data)", ledger_id=self.ledger_id)
        if isinstance(entry_id, bool) or not isinstance(entry_id, int):
            raise InvalidArgumentError(f"entry id {entry_id!r} is not an integer",
                                       ledger_id=self.ledger_id)
        self._writer_driver()  # a closed or reading handle refuses before anything is kept
        data = bytes(data)
        self._check_sizes([data])  # refused here, before it is kept: its id stays a gap
        fut: Future = Future()
        with self._adv_lock:
            if entry_id < self._next_id or entry_id in self._held:
                raise InvalidArgumentError(f"ledger {self.ledger_id}: entry {entry_id} was "
                                           f"added already", ledger_id=self.ledger_id)
            if entry_id >= self._next_id + self._window:
                raise InvalidArgumentError(
                    f"ledger {self.ledger_id}: entry {entry_id} is more than the window of "
                    f"{self._window} (the client's throttle) past entry {self._next_id}, the "
                    f"lowest not added yet", ledger_id=self.ledger_id)
            self._held[entry_id] = (data, fut)
            while self._next_id in self._held:
                payload, waiter = self._held.pop(self._next_id)
                expected = self._next_id
                try:
                    inner = super().add_entry_async(payload)
                except BaseException as exc:
                    # refused before the writer gave it an id: this one fails, and its id stays
                    # the next missing (a gap), so no later entry is stored under it
                    fail(waiter, exc)
                    break
                self._next_id += 1
                inner.add_done_callback(lambda f, w=waiter, e=expected: _chain(f, w, e))
        return fut

    def close_async(self) -> Future:
        """Close at the last confirmed entry (``LedgerHandle.close``); entries still held
        behind a gap fail with LedgerClosedError (they were never sent)."""
        with self._adv_lock:
            held, self._held = self._held, {}
        for entry_id, (_, waiter) in sorted(held.items()):
            fail(waiter, LedgerClosedError(
                f"ledger {self.ledger_id} was closed while entry {entry_id} waited for entry "
                f"{self._next_id} (never added); it was not written", ledger_id=self.ledger_id))
        return super().close_async()

    def add_entries_async(self, payloads) -> list[Future]:
        raise self._needs_ids()

    def add_range_async(self, payloads) -> Future:
        raise self._needs_ids()

    def _needs_ids(self) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"ledger {self.ledger_id} was created with create_ledger_adv: each entry needs its "
            f"id, add_entry(entry_id, data)", ledger_id=self.ledger_id)


def _chain(inner: Future, outer: Future, expected: int) -> None:
    """Complete ``outer`` as ``inner`` (the writer's add of entry ``expected``) completed."""
    if inner.exception() is not None:
        fail(outer, inner.exception())
    elif inner.result() != expected:  # only this handle adds, so the writer's id is ours
        fail(outer, InvalidArgumentError(f"entry {expected} was stored as {inner.result()}"))
    else:
        resolve(outer, expected)
