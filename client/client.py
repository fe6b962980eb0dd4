"""The public client: ``BookKeeper`` and ``LedgerHandle`` (synchronous, with ``*_async``
variants returning ``concurrent.futures.Future``).

Metadata steps (create, open, recover, delete) run on the calling thread, or on a small pool
for the ``*_async`` variants; everything that talks to bookies runs on the I/O thread
(``bookie.client.io``) inside the protocol state machines of ``bookie.client.protocol``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import random
import threading
import time
from concurrent.futures import Future
from typing import Iterator

from bookie.metadata import BadVersionError as StoreBadVersion
from bookie.metadata import LedgerMetadata, LedgerState
from bookie.client import metadata as md
from bookie.client.config import ClientConfig
from bookie.client.digest import (DigestManager, LedgerEntry, check_digest_type, master_key,
                                  password_digest)
from bookie.client.errors import (BKTimeoutError, BookKeeperError, ClientClosedError,
                                  DigestMismatchError, InvalidArgumentError, LedgerClosedError,
                                  NotEnoughBookiesError, UnauthorizedError)
from bookie.client.io import Driver, IOThread
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import (CLOSED, IN_RECOVERY, OPEN, Decision, LedgerInfo,
                                           choose_ensemble, recovery_close_decision)
from bookie.client.protocol.quorum import check_quorums
from bookie.client.protocol.reader import Deliver, ReadOp
from bookie.client.protocol.recovery import LacQuorumOp, LongPollLacOp, RecoveryOp
from bookie.client.protocol.writer import LedgerWriter

READ_CHUNK = 2048  # entries per read operation while iterating a range
ADD_CHUNK = 8192  # most entries handed to the I/O thread (and throttled) at once

log = logging.getLogger(__name__)


class _OpDriver(Driver):
    """Runs one finite operation; its Future gets the result (or the collected entries)."""

    def __init__(self, io, op, ledger_id: int, future: Future, collect: bool):
        super().__init__(io, op)
        self.ledger_id = ledger_id
        self.future = future
        self.entries: list | None = [] if collect else None

    def output(self, a) -> None:
        if isinstance(a, Deliver):
            self.entries.extend(a.entries)
        elif isinstance(a, A.Finished):
            self.io.unregister(self)
            if a.error is not None:
                _fail(self.future, a.error)
            else:
                _resolve(self.future, self.entries if self.entries is not None else a.result)

    def abort(self, error) -> None:
        _fail(self.future, error)


class _Throttle:
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

    _value = available  # the name BoundedSemaphore peeks used (client/log.py)

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


class _WriterDriver(Driver):
    """Runs a LedgerWriter: reports confirmed / failed ranges of entries to the callbacks of
    the batches they belong to, in entry order, and completes the close future.

    ``batches`` holds ``[first, last, callback]`` per batch handed over, in entry-id order;
    a Confirm(first, last) calls each overlapped batch's callback once with its part of the
    range, so the cost is per range and per batch, never per entry.
    """

    def __init__(self, io, writer: LedgerWriter, throttle: _Throttle, tick_s: float):
        super().__init__(io, writer)
        self.ledger_id = writer.ledger_id
        self.batches: collections.deque[list] = collections.deque()
        self.close_futures: list[Future] = []
        self.throttle = throttle
        self.tick_s = tick_s
        if tick_s > 0:
            io.later(tick_s, self._tick)

    def add(self, payloads, callback) -> None:
        try:
            first, actions = self.op.add(payloads, time.monotonic())
        except BookKeeperError as exc:
            self.throttle.release(len(payloads))
            _call(callback, -1, -1, exc)
            return
        self.batches.append([first, first + len(payloads) - 1, callback])
        self.io.execute(self, actions)

    def close(self, future: Future) -> None:
        self.close_futures.append(future)
        self.io.execute(self, self.op.close(time.monotonic()))

    def _tick(self) -> None:
        if self.op.state in ("writing", "closing"):
            self.event(A.Tick())
            self.io.later(self.tick_s, self._tick)

    def output(self, a) -> None:
        kind = type(a)
        if kind is A.Confirm:
            self._complete(a.first, a.last, None)
        elif kind is A.FailAdds:
            self._complete(a.first, a.last, a.error)
        elif kind is A.Finished:
            futures, self.close_futures = self.close_futures, []
            for f in futures:
                if a.error is not None:
                    _fail(f, a.error)
                else:
                    _resolve(f, a.result)
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
                _call(batch[2], lo, hi, error)
            else:
                batch[0] = last + 1
                _call(batch[2], lo, last, error)
                break

    def abort(self, error) -> None:
        while self.batches:
            lo, hi, callback = self.batches.popleft()
            self.throttle.release(hi - lo + 1)
            _call(callback, lo, hi, error)
        for f in self.close_futures:
            _fail(f, error)


def _call(callback, first: int, last: int, error) -> None:
    try:
        callback(first, last, error)
    except Exception:  # noqa: BLE001 - a user's callback must not stop the client
        log.exception("error in an add callback")


class _RangeWaiter:
    """An add callback completing one Future with ``range(first, last + 1)`` of the whole
    batch once its last entry is confirmed, or with the first error."""

    __slots__ = ("future", "count", "first", "seen")

    def __init__(self, future: Future, count: int):
        self.future, self.count, self.first, self.seen = future, count, None, 0

    def __call__(self, first: int, last: int, error) -> None:
        if error is not None:
            _fail(self.future, error)
            return
        if self.first is None:
            self.first = first
        self.seen += last - first + 1
        if self.seen >= self.count:
            _resolve(self.future, range(self.first, last + 1))


class _FirstIdWaiter:
    """An add callback completing one Future with the entry id of a one-entry batch."""

    __slots__ = ("future",)

    def __init__(self, future: Future):
        self.future = future

    def __call__(self, first: int, last: int, error) -> None:
        if error is not None:
            _fail(self.future, error)
        else:
            _resolve(self.future, first)


class _EachWaiter:
    """An add callback completing one Future per entry (the ``add_entries_async`` shape)."""

    __slots__ = ("futures", "next")

    def __init__(self, futures: list[Future]):
        self.futures, self.next = futures, 0

    def __call__(self, first: int, last: int, error) -> None:
        futures, i = self.futures, self.next
        if error is not None and first < 0:  # refused before ids were given: all the rest
            for f in futures[i:]:
                _fail(f, error)
            self.next = len(futures)
            return
        for entry_id in range(first, last + 1):
            if error is None:
                _resolve(futures[i], entry_id)
            else:
                _fail(futures[i], error)
            i += 1
        self.next = i


def _resolve(f: Future, value) -> None:
    if not f.done() and f.set_running_or_notify_cancel():
        f.set_result(value)


def _fail(f: Future, error) -> None:
    if not f.done() and f.set_running_or_notify_cancel():
        f.set_exception(error)


class BookKeeper:
    """A client of a set of bookies registered in one metadata store.

    Args:
        metadata: a metadata service URI (``zk://host:port/ledgers``, ``lmdb:///path``) or an
            open ``MetadataStore`` (then not closed by this client).
        config: a ``ClientConfig`` or dict of BookKeeper client keys; ``**keys`` override it.
    """

    def __init__(self, metadata, config=None, **keys):
        self.config = cfg = ClientConfig.build(config, **keys)
        if isinstance(metadata, str):
            with md.translated(what=f"opening metadata store {metadata}"):
                self._store = md.open_metadata(metadata, timeout_s=cfg.zkTimeout / 1000.0)
            self._own_store = True
        else:
            self._store, self._own_store = metadata, False
        self._keys: dict[int, bytes] = {}
        self._throttle = _Throttle(cfg.throttle)
        self._rng = random.Random()
        self._closed = False
        self._io = IOThread(
            self._keys.__getitem__, add_timeout_s=cfg.addEntryTimeout,
            read_timeout_s=cfg.readTimeout, batch_max_entries=cfg.addBatchMaxEntries,
            batch_max_bytes=cfg.addBatchMaxBytes, list_bookies=self._list_writable,
            write_metadata=self._write_metadata_action)
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="bookkeeper")

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the I/O thread (operations in flight fail with ClientClosedError) and close the
        metadata store if this client opened it.  Open ledgers are not closed."""
        if self._closed:
            return
        self._closed = True
        self._io.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_store:
            self._store.close()

    def __enter__(self) -> "BookKeeper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metadata_store(self):
        return self._store

    # -- ledgers -------------------------------------------------------------------------------

    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                      digest: str | None = None, password: bytes | None = None,
                      custom: dict | None = None) -> "LedgerHandle":
        """Create a ledger on ``ensemble_size`` writable bookies and open it for writing.

        Raises:
            InvalidArgumentError: not E >= Qw >= Qa >= 1, or unknown digest type.
            NotEnoughBookiesError: fewer than E writable bookies registered.
        """
        self._check_open()
        try:
            check_quorums(ensemble_size, write_quorum, ack_quorum)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        digest = check_digest_type(digest or self.config.digestType)
        password = self._password(password)
        with md.translated(what="listing bookies"):
            writable = self._store.list_bookies(readonly=False)
        ensemble = choose_ensemble(ensemble_size, writable, self._rng)
        if ensemble is None:
            raise NotEnoughBookiesError(
                f"cannot create a ledger on {ensemble_size} bookies: only {len(writable)} "
                f"writable bookie(s) registered ({', '.join(sorted(writable)) or 'none'}); start "
                f"more bookies or lower ensemble_size")
        meta = LedgerMetadata(ensemble_size, write_quorum, ack_quorum, digest_type=digest,
                              password_digest=password_digest(password),
                              custom=dict(custom or {}), fragments=[(0, list(ensemble))])
        with md.translated(what="creating a ledger"):
            ledger_id, version = self._store.create_ledger(meta)
        self._keys[ledger_id] = master_key(password)
        dm = DigestManager(ledger_id, digest, password)
        handle = LedgerHandle(self, ledger_id, md.to_info(ledger_id, meta), meta, dm)
        writer = LedgerWriter(handle._info, version, dm.encode, rng=self._rng,
                              explicit_lac_interval_s=self.config.explicitLacInterval / 1000.0,
                              encode_many=dm.encode_many)
        handle._meta_version = version

        def start():
            handle._driver = _WriterDriver(self._io, writer, self._throttle,
                                           self.config.explicitLacInterval / 2000.0)
            self._io.register(handle._driver)
        self._wait(self._io.call(start))
        handle._writer = writer
        return handle

    def create_ledger_async(self, *args, **kwargs) -> Future:
        return self._pool.submit(self.create_ledger, *args, **kwargs)

    def open_ledger(self, ledger_id: int, digest: str | None = None,
                    password: bytes | None = None, recovery: bool = True) -> "LedgerHandle":
        """Open a ledger for reading.

        With ``recovery`` (the default) a ledger that is not closed is fenced (its writer can
        add no more), its end found and re-replicated, and it is closed; every reader then sees
        the same entries.  Without, nothing is fenced and reads go up to the last-add-confirmed.

        Raises:
            NoSuchLedgerError, UnauthorizedError (wrong password; nothing was fenced),
            DigestMismatchError (wrong digest type), LedgerRecoveryError, BKTimeoutError.
        """
        self._check_open()
        digest = check_digest_type(digest or self.config.digestType)
        password = self._password(password)
        meta, version = self._read(ledger_id)
        if meta.digest_type != digest:
            raise DigestMismatchError(f"ledger {ledger_id} was written with digest "
                                      f"{meta.digest_type}, opened with {digest}",
                                      ledger_id=ledger_id)
        if meta.password_digest and meta.password_digest != password_digest(password):
            raise UnauthorizedError(f"wrong password for ledger {ledger_id} (checked against "
                                    f"the metadata store; nothing was fenced)",
                                    ledger_id=ledger_id)
        self._keys[ledger_id] = master_key(password)
        dm = DigestManager(ledger_id, digest, password)
        if recovery and meta.state is not LedgerState.CLOSED:
            meta, version = self._recover(ledger_id, meta, version, dm)
        handle = LedgerHandle(self, ledger_id, md.to_info(ledger_id, meta), meta, dm)
        handle._meta_version = version
        if meta.state is LedgerState.CLOSED:
            handle._lac = meta.last_entry_id
        else:
            handle._lac = self._wait(self._run_op(ledger_id, LacQuorumOp(handle._info, False)))
        return handle

    def open_ledger_async(self, *args, **kwargs) -> Future:
        return self._pool.submit(self.open_ledger, *args, **kwargs)

    def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space in their garbage collection.

        Raises:
            NoSuchLedgerError: no such ledger.
        """
        self._check_open()
        with md.translated(ledger_id, "deleting the ledger"):
            self._store.remove_ledger(ledger_id)
        self._keys.pop(ledger_id, None)

    def delete_ledger_async(self, ledger_id: int) -> Future:
        return self._pool.submit(self.delete_ledger, ledger_id)

    def list_ledgers(self) -> list[int]:
        with md.translated(what="listing ledgers"):
            return list(self._store.list_ledgers())

    # -- logs (ledgers to logs; see bookie.client.log) -----------------------------------------

    def open_log(self, name: str, *args, **kwargs):
        """Become the writer of log ``name``: see :func:`bookie.client.log.open_log`."""
        from bookie.client import log
        return log.open_log(self, name, *args, **kwargs)

    def read_log(self, name: str, *args, **kwargs):
        """Iterate over log ``name`` without fencing: see :func:`bookie.client.log.read_log`."""
        from bookie.client import log
        return log.read_log(self, name, *args, **kwargs)

    def list_logs(self) -> list[str]:
        from bookie.client import log
        return log.list_logs(self)

    def delete_log(self, name: str) -> None:
        from bookie.client import log
        log.delete_log(self, name)

    # -- internals -----------------------------------------------------------------------------

    def _recover(self, ledger_id: int, meta: LedgerMetadata, version, dm: DigestManager):
        info = md.to_info(ledger_id, meta)
        while info.state == OPEN:  # 1. OPEN -> IN_RECOVERY, with CAS (re-read either way)
            self._cas(ledger_id, meta, info.replace(state=IN_RECOVERY), version,
                      "marking the ledger in recovery")
            meta, version = self._read(ledger_id)
            info = md.to_info(ledger_id, meta)
        if info.state == CLOSED:
            return meta, version
        # 2. fence, find the end, re-replicate - replacing dead bookies with CAS on the
        #    IN_RECOVERY record at ``version`` (bookies, on the I/O thread)
        op = RecoveryOp(info, dm.decode, version)
        last, length = self._wait(self._run_op(ledger_id, op))
        info, version = op.info, op.version  # with the fragments recovery added
        while True:  # 3. close with CAS; a close by someone else wins (convergence)
            closed = info.replace(state=CLOSED, last_entry_id=last, length=length)
            if self._cas(ledger_id, meta, closed, version,
                         "closing the recovered ledger") is not None:
                return self._read(ledger_id)
            meta, version = self._read(ledger_id)
            info = md.to_info(ledger_id, meta)
            if recovery_close_decision(info) == Decision.DONE:
                return meta, version

    def _read(self, ledger_id: int):
        with md.translated(ledger_id, "reading ledger metadata"):
            return self._store.read_ledger(ledger_id)

    def _list_writable(self) -> list[str]:
        with md.translated(what="listing writable bookies"):
            return self._store.list_bookies(readonly=False)

    def _write_metadata_action(self, action: A.WriteMetadata):
        lid = action.info.ledger_id
        meta, _ = self._read(lid)
        version = self._cas(lid, meta, action.info, action.version, "updating ledger metadata")
        if version is not None:
            return A.MetadataWritten(action, version)
        meta, version = self._read(lid)
        return A.MetadataConflict(action, md.to_info(lid, meta), version)

    def _cas(self, ledger_id: int, meta, info: LedgerInfo, version, what: str):
        """Write ``info`` over ``meta`` if the record is still at ``version``: the new version,
        or None when another client changed it first (other store errors are raised)."""
        with md.translated(ledger_id, what):
            try:
                return self._store.write_ledger(ledger_id, md.with_info(meta, info), version)
            except StoreBadVersion:
                return None


    def _run_op(self, ledger_id: int, op, collect: bool = False) -> Future:
        fut: Future = Future()

        def start():
            driver = _OpDriver(self._io, op, ledger_id, fut, collect)
            self._io.register(driver)
            driver.start(op.start())
        self._io.submit(start)
        return fut

    def _wait(self, fut: Future, timeout_s: float | None = None):
        timeout_s = self.config.operationTimeout if timeout_s is None else timeout_s
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise BKTimeoutError(f"operation did not complete within {timeout_s} s "
                                 f"(operationTimeout); are the bookies up?") from None

    def _password(self, password) -> bytes:
        if password is None:
            return self.config.passwd
        return password.encode() if isinstance(password, str) else bytes(password)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the BookKeeper client is closed; create a new one")


class LedgerHandle:
    """An open ledger: the writer's (from create_ledger) or a reader's (from open_ledger)."""

    def __init__(self, bk: BookKeeper, ledger_id: int, info: LedgerInfo, meta, dm):
        self._bk = bk
        self.ledger_id = ledger_id
        self._info = info
        self._meta = meta
        self._meta_version = None
        self._dm = dm
        self._writer: LedgerWriter | None = None
        self._driver: _WriterDriver | None = None
        self._add_lock = threading.Lock()
        self._lac = info.last_entry_id

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
        return self.metadata.state == CLOSED

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
        return self._bk._wait(self.add_entry_async(data), timeout_s)

    def add_entry_async(self, data) -> Future:
        """Add one entry; a Future of its entry id.  Futures complete in entry order.  Blocks
        while ``throttle`` adds are outstanding in this client."""
        fut: Future = Future()
        self.add_entries_callback([data], _FirstIdWaiter(fut))
        return fut

    def add_entries_async(self, payloads) -> list[Future]:
        """Add several entries at once; one Future per entry (prefer ``add_range_async`` or
        ``add_entries_callback`` for many entries: a Future per entry costs more than the
        add itself)."""
        futures = [Future() for _ in payloads]
        if futures:
            self.add_entries_callback(payloads, _EachWaiter(futures))
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
        self.add_entries_callback(payloads, _RangeWaiter(fut, n))
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
        driver = self._writer_driver()
        payloads = [p if type(p) is bytes else bytes(p) for p in payloads]
        limit = self._bk.config.nettyMaxFrameSizeBytes - 32 - self._dm.size
        if payloads and max(map(len, payloads)) > limit:
            size = max(map(len, payloads))
            raise InvalidArgumentError(
                f"entry of {size} bytes exceeds the {limit}-byte limit "
                f"(nettyMaxFrameSizeBytes minus header and digest)", ledger_id=self.ledger_id)
        throttle, timeout_s = self._bk._throttle, self._bk.config.operationTimeout
        chunk = max(1, min(ADD_CHUNK, throttle.limit))
        submit = self._bk._io.submit
        with self._add_lock:  # one call's parts get consecutive ids
            for start in range(0, len(payloads), chunk):
                part = payloads[start:start + chunk] if len(payloads) > chunk else payloads
                if not throttle.acquire(len(part), timeout_s):
                    raise BKTimeoutError(
                        f"ledger {self.ledger_id}: {throttle.limit} adds outstanding for "
                        f"{timeout_s} s (throttle); bookies too slow or down",
                        ledger_id=self.ledger_id)
                try:
                    submit(driver.add, part, callback)
                except ClientClosedError:
                    throttle.release(len(part))
                    raise

    def close(self, timeout_s: float | None = None) -> None:
        """Writer: wait for outstanding adds, then close the ledger at the last confirmed entry
        (CAS).  Reader: nothing to do.

        Raises:
            LedgerFencedError: the ledger is being recovered by another client.
            LedgerClosedError: another client closed it at a different entry.
        """
        self._bk._wait(self.close_async(), timeout_s)

    def close_async(self) -> Future:
        fut: Future = Future()
        if self._writer is None:
            fut.set_result(None)
            return fut
        self._bk._io.submit(self._driver.close, fut)
        return fut

    def _writer_driver(self) -> _WriterDriver:
        if self._driver is None:
            raise LedgerClosedError(f"ledger {self.ledger_id} was opened for reading; only the "
                                    f"handle from create_ledger can add", ledger_id=self.ledger_id)
        return self._driver

    # -- reading -------------------------------------------------------------------------------

    def read_entries(self, first: int, last: int) -> Iterator[LedgerEntry]:
        """Entries ``first`` .. ``last`` (inclusive) in order, streamed in chunks.

        Raises:
            InvalidArgumentError: a range past the last-add-confirmed (call
                read_last_add_confirmed first when following a writer).
            DigestMismatchError, NoSuchEntryError, BKTimeoutError: an entry failed on every
                replica.
        """
        self._check_range(first, last)
        return self._iterate(first, last)

    def _iterate(self, first: int, last: int) -> Iterator[LedgerEntry]:
        hi = min(last, first + READ_CHUNK - 1)
        fut = self._read_op(first, hi)
        while True:
            entries = self._bk._wait(fut)
            lo = hi + 1
            if lo <= last:
                hi = min(last, lo + READ_CHUNK - 1)
                fut = self._read_op(lo, hi)  # prefetch while the caller consumes this chunk
            yield from entries
            if lo > last:
                return

    def read_entries_async(self, first: int, last: int) -> Future:
        """A Future of the list of entries ``first`` .. ``last``."""
        self._check_range(first, last)
        return self._read_op(first, last)

    def read_entry(self, entry_id: int) -> LedgerEntry:
        return next(iter(self.read_entries(entry_id, entry_id)))

    def _read_op(self, first: int, last: int) -> Future:
        return self._bk._run_op(self.ledger_id, ReadOp(self.metadata, first, last,
                                                       self._dm.decode,
                                                       decode_many=self._dm.decode_many,
                                                       avoid=self._bk._io.suspect_bookies()),
                                collect=True)

    def _check_range(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise InvalidArgumentError(f"bad entry range {first}..{last}", ledger_id=self.ledger_id)
        if last > self.last_add_confirmed:
            raise InvalidArgumentError(
                f"ledger {self.ledger_id}: entries up to {last} asked for, but the last add "
                f"confirmed is {self.last_add_confirmed}; read_last_add_confirmed() or "
                f"wait_for_last_add_confirmed() first", ledger_id=self.ledger_id)

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (refreshing the metadata first); returns and keeps it."""
        if self._writer is not None:
            return self._writer.lac
        if self._refresh():
            return self._lac
        lac = self._bk._wait(self._bk._run_op(self.ledger_id, LacQuorumOp(self._info, False)))
        self._lac = max(self._lac, lac)
        return self._lac

    def wait_for_last_add_confirmed(self, after_entry_id: int, timeout_s: float = 10.0) -> int:
        """Long-poll until the LAC passes ``after_entry_id`` or ``timeout_s`` runs out; returns
        the LAC known then (check it: it may still be <= after_entry_id)."""
        if self._writer is not None or self._lac > after_entry_id:
            return self.last_add_confirmed
        if self._refresh():
            return self._lac
        op = LongPollLacOp(self._info, after_entry_id, timeout_s)
        lac = self._bk._wait(self._bk._run_op(self.ledger_id, op),
                             timeout_s + self._bk.config.readTimeout + 5)
        self._lac = max(self._lac, lac)
        return self._lac

    def read_new_entries_async(self, after_entry_id: int, timeout_s: float = 10.0,
                               max_entries: int = READ_CHUNK) -> Future:
        """Tailing in one step: a Future of the entries after ``after_entry_id`` that are
        confirmed (at most ``max_entries``), long-polling the bookies until there are some.

        When the LAC known here already passes ``after_entry_id`` the read starts at once;
        otherwise the long poll and the read that follows it run back to back on the I/O
        thread (no hop through the caller's thread in between).  The list is empty when
        ``timeout_s`` ran out with nothing new; ``is_closed`` then tells whether more can come.

        Raises (through the Future): as ``read_entries``, and BKTimeoutError.
        """
        if after_entry_id < -1 or max_entries < 1:
            raise InvalidArgumentError(f"bad tail read after {after_entry_id} of {max_entries} "
                                       f"entries", ledger_id=self.ledger_id)
        if self.last_add_confirmed <= after_entry_id and self._writer is None:
            self._refresh()  # a closed ledger's end, or a new fragment to poll
        if self.last_add_confirmed > after_entry_id or self._writer is not None or \
                self._info.state == CLOSED:
            lac = self.last_add_confirmed
            if lac <= after_entry_id:
                fut: Future = Future()
                fut.set_result([])
                return fut
            return self._read_op(after_entry_id + 1, min(lac, after_entry_id + max_entries))
        outer: Future = Future()
        poll = self._bk._run_op(self.ledger_id, LongPollLacOp(self._info, after_entry_id,
                                                              timeout_s))

        def read(done: Future) -> None:  # on the I/O thread
            if done.exception() is not None:
                _fail(outer, done.exception())
            else:
                _resolve(outer, done.result())

        def polled(done: Future) -> None:  # on the I/O thread
            try:
                self._lac = max(self._lac, done.result())
                if self._lac <= after_entry_id:
                    _resolve(outer, [])
                    return
                last = min(self._lac, after_entry_id + max_entries)
                self._read_op(after_entry_id + 1, last).add_done_callback(read)
            except BaseException as exc:  # handed to the caller through the future
                _fail(outer, exc)
        poll.add_done_callback(polled)
        return outer

    def _refresh(self) -> bool:
        """Re-read the metadata (a writer may have changed ensembles or closed); True if closed."""
        if self._info.state == CLOSED:
            return True
        meta, version = self._bk._read(self.ledger_id)
        self._meta, self._meta_version = meta, version
        self._info = md.to_info(self.ledger_id, meta)
        if self._info.state == CLOSED:
            self._lac = self._info.last_entry_id
            return True
        return False
