"""``LedgerHandle``: an open ledger - the writer's (from ``BookKeeper.create_ledger``) or a
reader's (from ``BookKeeper.open_ledger``).

A handle holds what it needs and nothing of the client's: the ledger's metadata as last seen,
its digest manager and master key, the ``OpRunner`` that runs its operations on the I/O thread,
the ``ClientStore`` it re-reads metadata from, and - for the writer - the ``WriterDriver`` its
adds go to.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Iterator

from bookie import wire
from bookie.client.digest import DigestManager, LedgerEntry
from bookie.client.drivers import (EachWaiter, FirstIdWaiter, OpRunner, RangeWaiter,
                                   WriterDriver, fail, resolve)
from bookie.client.errors import ClientClosedError, InvalidArgumentError, LedgerClosedError
from bookie.client.metadata import ClientStore, to_info
from bookie.client.protocol.lac import LacQuorumOp, LongPollLacOp
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.reader import ReadOp
from bookie.client.protocol.staleness import refresh_wanted, wakes_a_poll, worth_retrying

log = logging.getLogger("bookie.client")

READ_CHUNK = 2048  # entries per read operation while iterating a range


def check_entry_range(ledger_id: int, last_add_confirmed: int, first: int, last: int) -> None:
    """Raise InvalidArgumentError unless ``first``..``last`` is a readable range: not empty,
    not negative, not past the last-add-confirmed."""
    if first < 0 or last < first:
        raise InvalidArgumentError(f"bad entry range {first}..{last}", ledger_id=ledger_id)
    if last > last_add_confirmed:
        raise InvalidArgumentError(
            f"ledger {ledger_id}: entries up to {last} asked for, but the last add "
            f"confirmed is {last_add_confirmed}; read_last_add_confirmed() or "
            f"wait_for_last_add_confirmed() first", ledger_id=ledger_id)


class LedgerHandle:
    """An open ledger: the writer's (from create_ledger) or a reader's (from open_ledger)."""

    def __init__(self, ledger_id: int, info: LedgerInfo, digest: DigestManager,
                 master_key: bytes, runner: OpRunner, store: ClientStore,
                 max_frame_size_bytes: int, *, writer: WriterDriver | None = None,
                 last_add_confirmed: int | None = None):
        """
        Args:
            info: the metadata as read (or as the recovery that opened the ledger closed it).
            writer: the writer's driver (a writer's handle only).
            last_add_confirmed: a reader's starting LAC (default: the metadata's last entry).
        """
        self.ledger_id = ledger_id
        self._info = info
        self._dm = digest
        self._master_key = master_key
        self._runner = runner
        self._store = store
        self._max_frame_size_bytes = max_frame_size_bytes
        self._writer = writer
        self._add_lock = threading.Lock()
        # the highest entry id handed to the writer by this handle (``last_add_pushed``): set
        # when ``add_*`` returns, before the I/O thread has taken the entries
        self._handed = writer.op.last_add_pushed if writer is not None else -1
        self._lac = info.last_entry_id if last_add_confirmed is None else last_add_confirmed
        # A reader's watch on the metadata while it long-polls (``_long_poll``): the wake-ups
        # of the polls parked now, and the watch's cancel (None: not watching).
        self._watch_lock = threading.Lock()
        self._parked: set = set()
        self._unwatch = None
        self._watching = False  # the watch is on: every change from now on reaches ``_seen``
        self._polled_empty = True  # the last long poll found nothing (or none ran yet)
        self._plain_polls: set[str] = set()  # bookies that refused a poll with entries (older)

    def __repr__(self) -> str:
        return (f"<LedgerHandle {self.ledger_id} {'writer' if self._writer else 'reader'} "
                f"lac={self.last_add_confirmed}>")

    # -- state ---------------------------------------------------------------------------------

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be confirmed (-1: none)."""
        return self._writer.lac if self._writer is not None else self._lac

    @property
    def metadata(self) -> LedgerInfo:
        return self._writer.info if self._writer is not None else self._info

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    @property
    def length(self) -> int:
        if self._writer is not None:
            return self._writer.confirmed_length
        return self.metadata.length

    @property
    def digest_type(self) -> str:
        return self._dm.digest_type

    # -- writing -------------------------------------------------------------------------------

    def add_entry(self, data, timeout_s: float | None = None) -> int:
        """Add one entry; returns its entry id once Qa bookies stored it and every earlier
        entry is confirmed.

        Raises:
            LedgerClosedError, LedgerFencedError, NotEnoughBookiesError, BKTimeoutError, ...
        """
        return self._runner.wait(self.add_entry_async(data), timeout_s)

    def add_entry_async(self, data) -> Future:
        """Add one entry; a Future of its entry id.  Futures complete in entry order.  Blocks
        while ``throttle`` adds are outstanding in this client."""
        fut: Future = Future()
        self.add_entries_callback([data], FirstIdWaiter(fut))
        return fut

    def add_entries_async(self, payloads) -> list[Future]:
        """Add several entries at once; one Future per entry (prefer ``add_range_async`` or
        ``add_entries_callback`` for many entries: a Future per entry costs more than the
        add itself)."""
        futures = [Future() for _ in payloads]
        if futures:
            self.add_entries_callback(payloads, EachWaiter(futures))
        return futures

    def add_range_async(self, payloads) -> Future:
        """Add several entries with one completion: a Future of ``range(first, last + 1)``, the
        consecutive entry ids they got, set once the last of them is confirmed (so all of
        them are: entries confirm in order).

        If it fails, a prefix of the entries may have been confirmed; ``last_add_confirmed``
        says up to where.  Blocks while the throttle is full, as ``add_entry_async``.
        """
        fut: Future = Future()
        n = len(payloads)
        if n == 0:
            fut.set_result(range(0))
            return fut
        self.add_entries_callback(payloads, RangeWaiter(fut, n))
        return fut

    def add_entries_callback(self, payloads, callback) -> None:
        """Add several entries; ``callback(first_entry_id, last_entry_id, error)`` reports them.

        The payloads get consecutive entry ids (calls on one handle are serialised).  The
        callback runs on the client's I/O thread, once per range of entries as the range is
        confirmed (``error`` None) or fails (``error`` a BookKeeperError), in entry order;
        together the calls cover every entry of the batch exactly once.  If the ledger refuses
        the batch before giving it ids (closed, failed), the one call is ``(-1, -1, error)``.
        The callback must be quick and must not block: it delays every other answer.

        Blocks while ``throttle`` adds are outstanding in this client; more payloads than the
        throttle are handed over in parts as room frees up.

        Raises:
            InvalidArgumentError: a payload over the size limit (nothing was added).
            BKTimeoutError: no room in the throttle for ``operationTimeout`` (the parts
                handed over before are added and reported).
            LedgerClosedError: a handle opened for reading.  ClientClosedError.
        """
        writer = self._writer_driver()
        payloads = [p if type(p) is bytes else entry_bytes(p) for p in payloads]
        self._check_sizes(payloads)
        with self._add_lock:  # one call's parts get consecutive ids
            try:
                self._runner.hand_over(writer, payloads, callback)
            except BaseException:
                # some parts may have gone before the throttle timed out: the writer knows
                self._handed = max(self._handed, writer.op.last_add_pushed)
                raise
            self._handed += len(payloads)

    def _check_sizes(self, payloads: list) -> None:
        """Raises InvalidArgumentError when a payload is over the size limit (nothing added,
        no entry id used)."""
        limit = self._max_frame_size_bytes - 32 - self._dm.size
        if payloads and max(map(len, payloads)) > limit:
            size = max(map(len, payloads))
            raise InvalidArgumentError(
                f"entry of {size} bytes exceeds the {limit}-byte limit "
                f"(nettyMaxFrameSizeBytes minus header and digest)", ledger_id=self.ledger_id)

    def close(self, timeout_s: float | None = None) -> None:
        """Writer: wait for outstanding adds, then close the ledger at the last confirmed entry
        (CAS).  Reader: nothing to do.

        Raises:
            LedgerFencedError: the ledger is being recovered by another client.
            LedgerClosedError: another client closed it at a different entry.
        """
        self._runner.wait(self.close_async(), timeout_s)

    def close_async(self) -> Future:
        if self._writer is None:
            self._stop_watching()
            fut: Future = Future()
            fut.set_result(None)
            return fut
        return self._runner.close_writer(self._writer)

    def _writer_driver(self) -> WriterDriver:
        if self._writer is None:
            raise LedgerClosedError(f"ledger {self.ledger_id} was opened for reading; only the "
                                    f"handle from create_ledger can add", ledger_id=self.ledger_id)
        return self._writer

    # -- reading -------------------------------------------------------------------------------

    def read_entries(self, first: int, last: int) -> Iterator[LedgerEntry]:
        """Entries ``first`` .. ``last`` (inclusive) in order, streamed in chunks.

        Raises:
            InvalidArgumentError: a range past the last-add-confirmed (call
                read_last_add_confirmed first when following a writer).
            DigestMismatchError, NoSuchEntryError, BKTimeoutError: an entry failed on every
                replica.
        """
        check_entry_range(self.ledger_id, self.last_add_confirmed, first, last)
        return self._iterate(first, last)

    def _iterate(self, first: int, last: int) -> Iterator[LedgerEntry]:
        hi = min(last, first + READ_CHUNK - 1)
        fut = self._read_op(first, hi)
        while True:
            entries = self._runner.wait(fut)
            lo = hi + 1
            if lo <= last:
                hi = min(last, lo + READ_CHUNK - 1)
                fut = self._read_op(lo, hi)  # prefetch while the caller consumes this chunk
            yield from entries
            if lo > last:
                return

    def read_entries_async(self, first: int, last: int) -> Future:
        """A Future of the list of entries ``first`` .. ``last``."""
        check_entry_range(self.ledger_id, self.last_add_confirmed, first, last)
        return self._read_op(first, last)

    def read_entry(self, entry_id: int) -> LedgerEntry:
        return next(iter(self.read_entries(entry_id, entry_id)))

    def _read_op(self, first: int, last: int) -> Future:
        """A Future of the entries ``first``..``last``.  A reader's read that fails for want
        of entries its LAC covers re-reads the metadata and, if the entries moved to another
        ensemble meanwhile (the writer replaced bookies), reads again there
        (``client/protocol/staleness.py``)."""
        info = self.metadata
        fut = self._start_read(info, first, last)
        if self._writer is not None:
            return fut  # the writer's view is the newest there is
        outer: Future = Future()
        self._follow(fut, outer, info, first, last)
        return outer

    def _start_read(self, info: LedgerInfo, first: int, last: int) -> Future:
        decode, decode_many, finish = self._read_checks(info)
        op = ReadOp(info, first, last, decode,
                    decode_many=decode_many, avoid=self._runner.suspect_bookies(),
                    speculative_timeout_s=self._runner.speculative_read_timeout_s)
        return finish(self._runner.run(op, self.ledger_id, self._master_key, collect=True))

    def _read_checks(self, info: LedgerInfo):
        """(decode, decode_many, wrap of the read's Future) for a read under ``info``: the
        digest's; a verifiable ledger's handle adds its Merkle checks (handle_api)."""
        return self._dm.decode, self._dm.decode_many, _same

    def _follow(self, fut: Future, outer: Future, info: LedgerInfo, first: int,
                last: int) -> None:
        """Complete ``outer`` with the read ``fut`` (made with ``info``), or with a read
        again on a fresh view of the metadata when the staleness rules say so.  Cancelling
        ``outer`` cancels the read in flight."""
        outer.add_done_callback(lambda o: o.cancelled() and fut.cancel())

        def refreshed(r: Future, error: BaseException) -> None:  # on the metadata pool
            fresh = None if r.exception() is not None else r.result()
            if fresh is None or outer.done() or not worth_retrying(info, fresh, first, last):
                fail(outer, error)
                return
            try:
                again = self._start_read(fresh, first, last)
            except BaseException as exc:  # the client closed meanwhile: to the caller
                fail(outer, exc)
                return
            self._follow(again, outer, fresh, first, last)

        def done(f: Future) -> None:  # on the I/O thread
            if f.cancelled():
                outer.cancel()
                return
            error = f.exception()
            if error is None:
                resolve(outer, f.result())
            elif outer.done() or not refresh_wanted(error, last, self._lac):
                fail(outer, error)
            else:
                try:
                    reread = self._runner.io.offload(self._reread_info)
                except BaseException:  # the client is closing: the read's own error stands
                    fail(outer, error)
                    return
                reread.add_done_callback(lambda r: refreshed(r, error))
        fut.add_done_callback(done)

    def _reread_info(self) -> LedgerInfo:
        """The ledger's metadata as the store has it now (kept as this reader's view)."""
        info, _ = self._store.read_info(self.ledger_id)
        self._info = info
        if info.state is LedgerState.CLOSED:
            self._lac = max(self._lac, info.last_entry_id)
        return info

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (refreshing the metadata first); returns and keeps it."""
        if self._writer is not None:
            return self._writer.lac
        if self._refresh():
            return self._lac
        lac = self._runner.wait(self._runner.run(LacQuorumOp(self._info, False),
                                                 self.ledger_id, self._master_key))
        self._lac = max(self._lac, lac)
        return self._lac

    def wait_for_last_add_confirmed(self, after_entry_id: int, timeout_s: float = 10.0) -> int:
        """Long-poll until the LAC passes ``after_entry_id`` or ``timeout_s`` runs out; returns
        the LAC known then (check it: it may still be <= after_entry_id)."""
        if self._writer is not None or self._lac > after_entry_id:
            return self.last_add_confirmed
        if self._view_closed():
            return self._lac
        lac = self._runner.wait(self._long_poll(after_entry_id, timeout_s),
                                timeout_s + self._runner.io.read_timeout_s + 5)
        self._lac = max(self._lac, lac)
        return self._lac

    def read_new_entries_async(self, after_entry_id: int, timeout_s: float = 10.0,
                               max_entries: int = READ_CHUNK) -> Future:
        """Tailing in one step: a Future of the entries after ``after_entry_id`` that are
        confirmed (at most ``max_entries``), long-polling the bookies until there are some.

        When the LAC known here already passes ``after_entry_id`` the read starts at once;
        otherwise the long poll asks for the entries too (wire.py WITH_ENTRIES): those its
        answer carries are verified as a read's are (digest, ledger id, entry ids in order from
        ``after_entry_id`` + 1, no gap) and returned without a READ; what they do not cover is
        read right after, on the I/O thread (no hop through the caller's thread).  The list is empty when
        ``timeout_s`` ran out with nothing new; ``is_closed`` then tells whether more can come.
        A close (or a new fragment) while the poll waits ends it at once (``_long_poll``).

        Raises (through the Future): as ``read_entries``, and BKTimeoutError.
        """
        if after_entry_id < -1 or max_entries < 1:
            raise InvalidArgumentError(f"bad tail read after {after_entry_id} of {max_entries} "
                                       f"entries", ledger_id=self.ledger_id)
        if self.last_add_confirmed <= after_entry_id and self._writer is None:
            self._view_closed()  # a closed ledger's end, or a new fragment to poll
        if self.last_add_confirmed > after_entry_id or self._writer is not None or \
                self._info.state is LedgerState.CLOSED:
            lac = self.last_add_confirmed
            if lac <= after_entry_id:
                fut: Future = Future()
                fut.set_result([])
                return fut
            return self._read_op(after_entry_id + 1, min(lac, after_entry_id + max_entries))
        outer: Future = Future()
        carried: list = []  # the entries the poll's answer carried (``_long_poll``)
        poll = self._long_poll(after_entry_id, timeout_s, max_entries, carried)
        got: list = []  # those of them that check out

        def read(done: Future) -> None:  # on the I/O thread
            if done.exception() is not None:
                fail(outer, done.exception())
            else:
                resolve(outer, got + done.result() if got else done.result())

        def polled(done: Future) -> None:  # on the I/O thread
            try:
                self._lac = max(self._lac, done.result())
                if self._lac <= after_entry_id:
                    resolve(outer, [])
                    return
                last = min(self._lac, after_entry_id + max_entries)
                got.extend(self._carried_entries(carried[0] if carried else None, after_entry_id, last))
                if after_entry_id + len(got) == last:
                    resolve(outer, got)
                else:
                    self._read_op(after_entry_id + len(got) + 1, last).add_done_callback(read)
            except BaseException as exc:  # handed to the caller through the future
                fail(outer, exc)
        poll.add_done_callback(polled)
        return outer

    def _carried_entries(self, carried, after_entry_id: int, last: int) -> list:
        """The entries a poll's answer carried (``RawEntries`` or None) that check out as a
        read's would: decoded by the read's own checks (digest; ``_read_checks``), each of
        this ledger, with ids after_entry_id + 1, + 2, ... and none past ``last``; the first
        that does not ends them (the rest is read as without them).  Nothing when the read's
        checks need more than the digest (a verifiable closed ledger's)."""
        if not carried:
            return []
        _, decode_many, finish = self._read_checks(self.metadata)
        if finish is not _same:
            return []
        decoded = decode_many(carried)
        n = min(len(decoded), last - after_entry_id)
        ids = getattr(decoded, "entry_ids", None)
        if ids is not None and decoded.intact and ids[:n] == list(range(after_entry_id + 1, after_entry_id + n + 1)):
            return decoded[:n]  # one pass said: intact, this ledger's (decode_many), in order
        out = []
        for entry in decoded[:n]:
            if isinstance(entry, BaseException) or entry.ledger_id != self.ledger_id or \
                    entry.entry_id != after_entry_id + len(out) + 1:
                break
            out.append(entry)
        return out

    def _refresh(self) -> bool:
        """Re-read the metadata (a writer may have changed ensembles or closed); True if closed."""
        if self._info.state is LedgerState.CLOSED:
            return True
        self._info, _ = self._store.read_info(self.ledger_id)
        if self._info.state is LedgerState.CLOSED:
            self._lac = self._info.last_entry_id
            return True
        return False

    # -- a reader's long polls and its watch on the metadata ----------------------------------

    def _view_closed(self) -> bool:
        """Before a long poll: whether the ledger is closed, its metadata read again unless
        the watch keeps this view current (on, and the last poll found entries: a poll that
        found nothing re-reads, so a change the watch missed costs at most one poll).  A
        reader keeping up with a busy writer then reads the store once, not once a round."""
        if self._watching and not self._polled_empty:
            return self._info.state is LedgerState.CLOSED
        return self._refresh()

    def _long_poll(self, after_entry_id: int, timeout_s: float, max_entries: int = 0,
                   carried: list | None = None) -> Future:
        """A Future of the LAC after a long poll of the view's last fragment (with
        ``max_entries``, asking for the entries too: LongPollLacOp; those the answer carried,
        unchecked, are appended to ``carried`` before the Future completes), which follows
        the ledger's metadata while it waits (a watch, ``_watch``): closed (or deleted), the
        poll ends at once with the LAC known here (a closed ledger's last entry); a new
        fragment, it polls that fragment's bookies instead for the time left.  The bookies
        never learn that a ledger ended (its last entry is confirmed by no later add), so
        without the watch a tailer learned of the last entry and of the close only when its
        poll ran out."""
        out: Future = Future()
        settle = threading.RLock()  # the poll's end and a wake-up race: one of them decides
        deadline = time.monotonic() + timeout_s
        polls: list[Future] = []  # the poll in flight

        def start() -> None:  # with ``settle`` held
            left = max(deadline - time.monotonic(), 0.001)
            op = LongPollLacOp(self._info, after_entry_id, left, max_entries, wire.MAX_READ_BYTES,
                               frozenset(self._plain_polls))
            poll = self._runner.run(op, self.ledger_id, self._master_key)
            polls[:] = [poll]
            poll.add_done_callback(lambda f: polled(f, op))

        def polled(f: Future, op: LongPollLacOp) -> None:  # on the I/O thread
            if f.cancelled():
                return  # replaced or woken: ``out`` is someone else's to complete
            with settle:
                if polls[0] is not f:
                    return  # a poll of an older view, replaced meanwhile
                with self._watch_lock:
                    self._parked.discard(wake)
                if f.exception() is not None:
                    self._polled_empty = True
                    fail(out, f.exception())
                else:
                    self._plain_polls |= op.refused
                    self._polled_empty = f.result() <= after_entry_id
                    if carried is not None and op.entries is not None:
                        carried.append(op.entries)
                    resolve(out, f.result())

        def wake(ended: bool) -> None:  # the watch's thread: the metadata moved on
            with settle:
                if out.done():
                    return
                old = polls[0] if polls else None
                if ended:
                    with self._watch_lock:
                        self._parked.discard(wake)
                    resolve(out, self._lac)
                else:
                    start()
            if old is not None:
                old.cancel()  # ends that operation: it sends nothing more

        with self._watch_lock:
            closed = self._info.state is LedgerState.CLOSED  # the watch took a close just now
            if not closed:
                self._parked.add(wake)  # from here on, every change wakes this poll
        with settle:
            if closed:
                resolve(out, self._lac)
            elif not out.done() and not polls:  # (a wake-up may have started it already)
                start()
        self._watch()
        return out

    def _watch(self) -> None:
        """Watch the metadata from the first long poll on, until the ledger is closed (or
        deleted) or this handle is; a change between the last read and the watch's start is
        caught by one more read after it.  A store that cannot watch leaves polls to run out,
        as before."""
        with self._watch_lock:
            if self._unwatch is not None or self._info.state is LedgerState.CLOSED:
                return
            self._unwatch = cell = [None]  # a placeholder until the store returns the cancel
        ref = weakref.ref(self)

        def changed(meta, _version) -> None:  # the store's watch thread
            handle = ref()
            if handle is None:  # dropped without close: nobody polls
                _cancel_quietly(cell)
                return
            handle._seen(None if meta is None else to_info(handle.ledger_id, meta))
        try:
            cell[0] = self._store.store.watch_ledger(self.ledger_id, changed)
            weakref.finalize(self, _cancel_quietly, cell)  # a handle dropped without close()
            fresh, _ = self._store.read_info(self.ledger_id)
        except Exception as exc:  # noqa: BLE001 - a store down: the polls run out as before
            log.debug("ledger %d: no watch on its metadata (%s)", self.ledger_id, exc)
            return  # (not ``_watching``: each poll reads the metadata first, as without one)
        self._seen(fresh)
        with self._watch_lock:
            self._watching = self._unwatch is cell  # not if it ended (closed) meanwhile

    def _seen(self, info: LedgerInfo | None) -> None:
        """The metadata as the watch (or the read after it) saw it; None: the ledger was
        deleted.  A record ahead of this view is taken, and every parked poll woken."""
        with self._watch_lock:
            if info is not None:
                if not wakes_a_poll(self._info, info):
                    return
                self._info = info
                if info.state is LedgerState.CLOSED:
                    self._lac = max(self._lac, info.last_entry_id)
            wakes = list(self._parked)
            ended = info is None or info.state is LedgerState.CLOSED
        if ended:
            self._stop_watching()
        for wake in wakes:
            wake(ended)

    def _stop_watching(self) -> None:
        with self._watch_lock:
            cell, self._unwatch = self._unwatch, None
            self._watching = False
        if cell is not None:
            _cancel_quietly(cell)


def _same(fut: Future) -> Future:
    return fut


def _cancel_quietly(cell: list) -> None:
    """Cancel the watch in ``cell`` (once; a store closed meanwhile is no error)."""
    cancel, cell[0] = cell[0], None
    if cancel is not None:
        try:
            cancel()
        except Exception as exc:  # noqa: BLE001 - a store closed meanwhile
            log.debug("cancelling a ledger metadata watch: %s", exc)


def entry_bytes(data) -> bytes:
    """An entry's payload as bytes: bytes-like objects are copied; anything else (a str, whose
    encoding only the caller knows; an int, which ``bytes()`` would turn into zeros) is an
    ``InvalidArgumentError`` saying what to pass."""
    if isinstance(data, str):
        raise InvalidArgumentError("an entry is bytes, not str: encode it (data.encode()) or "
                                   "pass bytes")
    try:
        with memoryview(data) as view:
            return view.tobytes()
    except TypeError:
        raise InvalidArgumentError(f"an entry is bytes (or a bytes-like object), not "
                                   f"{type(data).__name__}") from None
