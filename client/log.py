"""Logs: an ordered list of ledgers with a single writer, kept with compare-and-swap.

    from bookie.client import BookKeeper, open_log, read_log
    with BookKeeper("lmdb:///var/lib/bookie/metadata") as bk:
        log = open_log(bk, "orders", password=b"pw")      # become the writer
        pos = log.append(b"payload")                        # LogPosition(ledger_id, entry_id)
        log.roll()                                          # next ledger
        log.close()
        for rec in read_log(bk, "orders", password=b"pw"):  # every entry, in log order
            rec.ledger_id, rec.entry_id, rec.data

Theory of operation
-------------------
A log is the record at ``/logs/<name>`` in the metadata store (see ``encode_record``): the ids
of its ledgers in log order.  Every change of the list is a CAS on the record's version.  The
protocol is BookKeeper's "ledgers to logs":

* **opening as the writer**: read the list; recover (fence and close) its last *two* ledgers;
  create a new ledger; CAS the list with the new ledger appended.  A lost CAS means another
  writer changed the list since we read it: we delete the ledger we created and raise
  ``LogFencedError``.  No append is accepted before the CAS succeeded.
* **rolling**: create the next ledger and CAS it onto the list *before* closing the current
  one; appends go on to the current ledger meanwhile.  Then the current ledger is closed (its
  outstanding appends settle first) and appends move to the new one, so a log never has an
  entry after a gap.  Fencing two ledgers on open covers the writer between CAS and close.
* **taking over**: a second writer's open fences the first writer's ledger(s); the first
  writer's appends then fail with ``LogFencedError``.  Recovery keeps every entry that was
  acknowledged, so nothing an append returned is lost.
* **reading** never fences: closed ledgers are read to their last entry; the first ledger that
  is not closed is read up to its last-add-confirmed and reading stops there (a later ledger's
  entries are never delivered before every earlier entry, so readers always see a prefix of
  the log, in order).
* **deleting**: remove the record (so no writer can roll it any more), then its ledgers.

Positions compare in log order as long as they come from the same log: ledgers are ordered by
their place in the list (ids grow, so plain tuple order agrees for lists made by this module).

This module is a recipe: it uses only the client's public API (ledgers, and the custom records
of ``BookKeeper.read_record`` / ``write_record`` / ... for the list), as kazoo's recipes use
only kazoo's client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import AsyncIterator, Iterator, NamedTuple

import orjson

from bookie.client.errors import (BadVersionError, BookKeeperError, InvalidArgumentError,
                                  LedgerClosedError, LedgerFencedError, MetadataStoreError,
                                  NoSuchLedgerError, NoSuchRecordError, RecordExistsError)

LOGS_PATH = "/logs"
FORMAT_VERSION = 1
MAX_NAME_LENGTH = 200

__all__ = ["open_log", "read_log", "list_logs", "delete_log", "create_log", "log_ledgers",
           "link_ledgers", "LogWriter", "LogPosition",
           "LogRecord", "LogFencedError", "LogWriterFailedError", "NoSuchLogError", "AsyncLogWriter", "open_log_async",
           "read_log_async", "encode_record", "decode_record"]


class LogFencedError(LedgerFencedError):
    """Another writer took the log over (or deleted it); this writer can append no more.

    An append that failed with this may or may not be in the log: read the log to find out.
    """

    code = "log_fenced"

    def __init__(self, message: str, *, log_name: str, ledger_id: int | None = None):
        super().__init__(message, ledger_id=ledger_id)
        self.log_name = log_name


class LogWriterFailedError(LogFencedError):
    """An earlier append of this writer failed, so it appends no more (else the log could hold
    a gap).  Open the log again: the new writer recovers the tail, so an append that failed
    may or may not be there."""

    code = "log_writer_failed"


class NoSuchLogError(BookKeeperError):
    """No log with this name exists in the metadata store."""

    code = "no_such_log"


class LogPosition(NamedTuple):
    """Where an entry is in a log."""
    ledger_id: int
    entry_id: int


class LogRecord(NamedTuple):
    """One entry of a log, as ``read_log`` yields it."""
    ledger_id: int
    entry_id: int
    data: bytes

    @property
    def position(self) -> LogPosition:
        return LogPosition(self.ledger_id, self.entry_id)


# ---- the record ---------------------------------------------------------------------------------

def log_path(name: str) -> str:
    """The record's path under the metadata root; checks the name."""
    if (not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH or "/" in name
            or "\x00" in name or name in (".", "..")):
        raise InvalidArgumentError(f"{name!r} is not a log name (1..{MAX_NAME_LENGTH} "
                                   f"characters, no '/', not '.' or '..')")
    return f"{LOGS_PATH}/{name}"


def encode_record(ledgers, ctime_ms: int | None = None) -> bytes:
    """The stored form of a log: ``{"format_version": 1, "ledgers": [id, ...], "ctime_ms": t}``.

    ``ledgers`` are in log order.  Readers ignore keys they do not know and refuse format
    versions they do not know, as for ledger records.
    """
    return orjson.dumps({"format_version": FORMAT_VERSION, "ledgers": [int(x) for x in ledgers],
                         "ctime_ms": int(time.time() * 1000) if ctime_ms is None else ctime_ms})


def decode_record(name: str, data: bytes) -> tuple[list[int], int]:
    """(ledger ids in log order, ctime_ms) of a stored record.

    Raises:
        MetadataStoreError: not a log record, or a format version this code does not know.
    """
    try:
        rec = orjson.loads(data)
        version = rec["format_version"]
        if version != FORMAT_VERSION:
            raise MetadataStoreError(f"log {name}: record format version {version} is not "
                                     f"known to this client (knows {FORMAT_VERSION}); upgrade")
        ledgers = [int(x) for x in rec["ledgers"]]
        return ledgers, int(rec.get("ctime_ms", 0))
    except MetadataStoreError:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise MetadataStoreError(f"log {name}: record does not decode ({exc})") from None


def _read_record(bk, name: str):
    """(ledgers, ctime_ms, version) of the log; NoSuchLogError if there is none."""
    try:
        data, version = bk.read_record(log_path(name))
    except NoSuchRecordError:
        raise NoSuchLogError(f"log {name} does not exist (never opened for writing, or "
                             f"deleted)") from None
    ledgers, ctime_ms = decode_record(name, data)
    return ledgers, ctime_ms, version


def _cas_record(bk, name: str, ledgers, ctime_ms: int, version) -> int | None:
    """Write the list if the record is still at ``version``: the new version, or None when it
    changed (or vanished) since."""
    try:
        return bk.write_record(log_path(name), encode_record(ledgers, ctime_ms), version)
    except (BadVersionError, NoSuchRecordError):
        return None


# ---- the writer ---------------------------------------------------------------------------------

def open_log(bk, name: str, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
             digest: str | None = None, password: bytes | None = None, *, create: bool = True,
             roll_entries: int | None = None, roll_size_bytes: int | None = None,
             verifiable: bool | None = None) -> "LogWriter":
    """Become the log's single writer (creating the log if ``create`` and it does not exist).

    Reads the ledger list, recovers its last two ledgers (fencing any previous writer), creates
    a new ledger and appends it to the list with CAS.  Ledgers of the log use the given quorums,
    digest and password (readers need the same digest and password).

    Args:
        roll_entries / roll_size_bytes: roll to a new ledger before an append once the current
            ledger holds this many entries / payload bytes (None: only ``roll()`` rolls).
        verifiable: the log's new ledgers are verifiable (a Merkle root at close; None: the
            client key ``ledgerVerifiableByDefault``).
    Raises:
        LogFencedError: another writer changed the list while we opened (it won; retry only if
            this process should still be the writer).
        NoSuchLogError: no such log and ``create`` is false.
        InvalidArgumentError, NotEnoughBookiesError, LedgerRecoveryError, UnauthorizedError,
        BKTimeoutError, MetadataStoreError.
    """
    path = log_path(name)
    if roll_entries is not None and roll_entries < 1 or \
            roll_size_bytes is not None and roll_size_bytes < 1:
        raise InvalidArgumentError("roll_entries and roll_size_bytes must be >= 1 (or None)")
    try:
        ledgers, ctime_ms, version = _read_record(bk, name)
    except NoSuchLogError:
        if not create:
            raise
        try:
            bk.create_record(path, encode_record([]))
        except RecordExistsError:
            pass  # another writer created it first: go on, the CAS decides
        ledgers, ctime_ms, version = _read_record(bk, name)
    # 2. fence (recover and close) the last two ledgers: the previous writer may be writing to
    #    the penultimate one while it adds the last one to the list.
    _recover_tail(bk, name, ledgers, digest, password)
    # 3.-5. a new ledger, appended with CAS; nothing is written before the CAS succeeded.
    lh = bk.create_ledger(ensemble_size, write_quorum, ack_quorum, digest=digest,
                          password=password, custom={"log": name}, verifiable=verifiable)
    new_version = _cas_record(bk, name, ledgers + [lh.ledger_id], ctime_ms, version)
    if new_version is None:
        _discard(bk, lh)
        raise LogFencedError(f"log {name}: another writer changed its ledger list while this one "
                             f"was opening it; that writer owns the log now", log_name=name)
    return LogWriter(bk, name, lh, ledgers + [lh.ledger_id], ctime_ms, new_version,
                     (ensemble_size, write_quorum, ack_quorum, digest, password),
                     roll_entries, roll_size_bytes, verifiable)


def _recover_tail(bk, name: str, ledgers, digest, password) -> None:
    futures = [bk.open_ledger_async(lid, digest=digest, password=password, recovery=True)
               for lid in ledgers[-2:]]
    for lid, fut in zip(ledgers[-2:], futures):
        try:
            bk.wait(fut)
        except NoSuchLedgerError:
            pass  # deleted under the log (e.g. by delete_log racing us): nothing to fence


def _discard(bk, lh) -> None:
    """Best effort: close and delete a ledger that never made it into the list."""
    for step in (lh.close, lambda: bk.delete_ledger(lh.ledger_id)):
        try:
            step()
        except BookKeeperError:
            pass


class LogWriter:
    """The single writer of a log (from ``open_log``).  Thread-safe: appends from any thread
    take positions in the order of the calls."""

    def __init__(self, bk, name: str, lh, ledgers, ctime_ms: int, version, ledger_args,
                 roll_entries, roll_size_bytes, verifiable: bool | None = None):
        self._bk = bk
        self._verifiable = verifiable
        self.name = name
        self._lh = lh
        self._ledgers = list(ledgers)
        self._ctime_ms = ctime_ms
        self._version = version
        self._ledger_args = ledger_args
        self.roll_entries = roll_entries
        self.roll_size_bytes = roll_size_bytes
        self._count = 0  # appends handed to the current ledger
        self._bytes = 0
        self._lock = threading.Lock()  # current ledger, counters: the order of appends
        self._roll_lock = threading.Lock()  # one roll (metadata steps) at a time
        self._error: BookKeeperError | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<LogWriter {self.name} ledger={self._lh.ledger_id} ledgers={len(self._ledgers)}>"

    @property
    def ledger_id(self) -> int:
        """The ledger appends go to now."""
        return self._lh.ledger_id

    @property
    def ledgers(self) -> list[int]:
        """The log's ledger ids, in order, as this writer last wrote them."""
        return list(self._ledgers)

    # -- appending -----------------------------------------------------------------------------

    def append(self, data, timeout_s: float | None = None) -> LogPosition:
        """Append one entry; its position once it is acknowledged (and every earlier append).

        Raises:
            LogFencedError: another writer took over; this one can append no more.
            LedgerClosedError: this writer was closed.  Others as ``LedgerHandle.add_entry``.
        """
        return self._bk.wait(self.append_async(data), timeout_s)

    def append_async(self, data) -> Future:
        """Append one entry; a Future of its ``LogPosition``.  Futures complete in log order.

        Blocks while an automatic roll is due and being made (see ``roll``)."""
        if self.roll_due:
            with self._roll_lock:
                if self.roll_due:  # not rolled by another thread meanwhile
                    self._roll_locked()
        with self._lock:
            self._check_writable()
            lh = self._lh
            inner = lh.add_entry_async(data)
            self._count += 1
            self._bytes += len(data)
        out: Future = Future()
        inner.add_done_callback(lambda f: self._complete(out, lh.ledger_id, f))
        return out

    @property
    def roll_due(self) -> bool:
        """An append now would roll first (``roll_entries`` / ``roll_size_bytes`` reached)."""
        if self._closed or self._error is not None:
            return False
        return (self.roll_entries is not None and self._count >= self.roll_entries) or \
            (self.roll_size_bytes is not None and self._bytes >= self.roll_size_bytes)

    def _complete(self, out: Future, ledger_id: int, inner: Future) -> None:
        exc = inner.exception()
        if exc is not None:
            # A failed append ends this writer: a later append may only be acknowledged if
            # every earlier one was, or the log would hold a gap (the next ledger would carry
            # appends made after one that never reached the log).
            exc = self._translate(exc, ledger_id)
            if self._error is None:
                self._error = LogWriterFailedError(
                    f"log {self.name}: an append to ledger {ledger_id} failed ({exc}); this "
                    f"writer can append no more (open the log again to go on)",
                    log_name=self.name, ledger_id=ledger_id)
        if not out.set_running_or_notify_cancel():
            return
        if exc is None:
            out.set_result(LogPosition(ledger_id, inner.result()))
        else:
            out.set_exception(exc)

    def _translate(self, exc: BaseException, ledger_id: int) -> BaseException:
        if isinstance(exc, LedgerFencedError) and not isinstance(exc, LogFencedError):
            err = LogFencedError(f"log {self.name}: another writer took the log over (ledger "
                                 f"{ledger_id} was fenced); this writer can append no more: "
                                 f"{exc}", log_name=self.name, ledger_id=ledger_id)
            self._error = self._error or err
            return err
        return exc

    @property
    def append_may_block(self) -> bool:
        """An append now may block: it would roll first, or the client's throttle is full."""
        return self.roll_due or self._bk.throttle_available < 1

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LedgerClosedError(f"log {self.name}: this writer was closed",
                                    ledger_id=self._lh.ledger_id)

    # -- rolling -------------------------------------------------------------------------------

    def roll(self) -> int:
        """Start a new ledger; returns its id.

        Creates the ledger and CASes it onto the list while appends still go to the current
        ledger; then closes the current ledger (which waits for its outstanding appends) and
        only then switches appends to the new one.  Appends made during that last step wait
        for it, so the new ledger never holds an entry while an earlier append is unsettled:
        the log stays a gap-free sequence of appends, and append futures complete in order.

        Raises:
            LogFencedError: the list changed under us (another writer took over, or the log
                was deleted), or the current ledger was fenced.
        """
        with self._roll_lock:
            return self._roll_locked()

    def _roll_locked(self) -> int:
        self._check_writable()
        ensemble_size, write_quorum, ack_quorum, digest, password = self._ledger_args
        new = self._bk.create_ledger(ensemble_size, write_quorum, ack_quorum, digest=digest,
                                     password=password, custom={"log": self.name},
                                     verifiable=self._verifiable)
        ledgers = self._ledgers + [new.ledger_id]
        version = _cas_record(self._bk, self.name, ledgers, self._ctime_ms, self._version)
        if version is None:
            _discard(self._bk, new)
            self._error = self._error or LogFencedError(
                f"log {self.name}: rolling lost the compare-and-swap of the ledger list; "
                f"another writer took over (or the log was deleted)", log_name=self.name,
                ledger_id=self._lh.ledger_id)
            raise self._error
        self._ledgers, self._version = ledgers, version
        with self._lock:  # appends wait here until the old ledger is settled and closed
            old = self._lh
            try:
                old.close()
            except BookKeeperError as exc:
                # The list already names the new ledger; after a failed close the old one's
                # end is unknown, so writing on would risk a gap: this writer is done.
                self._error = self._error or self._translate(exc, old.ledger_id)
                raise self._error from None
            if self._error is None and old.last_add_confirmed != self._count - 1:
                # An append handed to the old ledger is not in it: none after it may go on.
                self._error = LogWriterFailedError(
                    f"log {self.name}: ledger {old.ledger_id} closed at entry "
                    f"{old.last_add_confirmed} of {self._count} appended; this writer can "
                    f"append no more (open the log again to go on)", log_name=self.name,
                    ledger_id=old.ledger_id)
            if self._error is not None:
                raise self._error
            self._lh = new
            self._count = self._bytes = 0
        return new.ledger_id

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for outstanding appends and close the current ledger (the log stays, ready
        for the next writer).  Idempotent.

        Raises:
            LogFencedError: another writer took over before the close.
        """
        with self._roll_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._lh.close()
            except LedgerFencedError as exc:
                raise self._translate(exc, self._lh.ledger_id) from None

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- readers, listing, deleting -----------------------------------------------------------------

def read_log(bk, name: str, start: LogPosition | tuple | None = None, digest: str | None = None,
             password: bytes | None = None) -> Iterator[LogRecord]:
    """Every entry of the log from ``start`` (inclusive; None: the beginning), in log order,
    without fencing anything.

    Closed ledgers are read to their last entry; the first ledger that is not closed (the
    writer's current one) is read up to its last-add-confirmed, and the iteration ends there.

    Raises:
        NoSuchLogError, UnauthorizedError, DigestMismatchError, BKTimeoutError, ...
    """
    ledgers, _, _ = _read_record(bk, name)
    if start is not None:
        start = LogPosition(*start)
        if start.ledger_id not in ledgers:
            raise InvalidArgumentError(f"log {name}: start {tuple(start)} names ledger "
                                       f"{start.ledger_id}, which is not in the log "
                                       f"(ledgers {ledgers})")
        ledgers = ledgers[ledgers.index(start.ledger_id):]
    return _read_ledgers(bk, name, ledgers, start, digest, password)


def _read_ledgers(bk, name, ledgers, start, digest, password) -> Iterator[LogRecord]:
    for lid in ledgers:
        try:
            rh = bk.open_ledger(lid, digest=digest, password=password, recovery=False)
        except NoSuchLedgerError:
            continue  # deleted from under the log (delete_log in progress)
        first = start.entry_id if start is not None and start.ledger_id == lid else 0
        last = rh.last_add_confirmed
        if last >= first:
            for entry in rh.read_entries(first, last):
                yield LogRecord(lid, entry.entry_id, entry.data)
        if not rh.is_closed:
            return  # a later ledger may hold entries past this one's LAC: stop at a prefix


def list_logs(bk) -> list[str]:
    """Names of the logs in the metadata store, sorted."""
    return bk.list_records(LOGS_PATH)


def delete_log(bk, name: str) -> None:
    """Remove the log: its record first (a writer's next roll then fails with
    LogFencedError), then its ledgers.

    Raises:
        NoSuchLogError: no such log.
    """
    while True:
        ledgers, _, version = _read_record(bk, name)
        try:
            bk.delete_record(log_path(name), version)
        except BadVersionError:
            continue  # rolled meanwhile: delete the longer list
        except NoSuchRecordError:
            raise NoSuchLogError(f"log {name} does not exist") from None
        break
    for lid in ledgers:
        try:
            bk.delete_ledger(lid)
        except NoSuchLedgerError:
            pass


# ---- linking ledgers written elsewhere (bulk writers such as the Spark sink) -------------------

def create_log(bk, name: str) -> bool:
    """Create log ``name`` with no ledger, if there is none; True if this call created it."""
    try:
        bk.create_record(log_path(name), encode_record([]))
        return True
    except RecordExistsError:
        return False


def log_ledgers(bk, name: str) -> tuple[list[int], int]:
    """``(ledger ids in log order, version)`` of the log's list; pass the version to
    ``link_ledgers``.

    Raises:
        NoSuchLogError.
    """
    ledgers, _, version = _read_record(bk, name)
    return ledgers, version


def link_ledgers(bk, name: str, ledger_ids, version: int) -> int:
    """Append ``ledger_ids`` (in that order) to the log's list with one CAS, if the list is
    still at ``version`` (from ``log_ledgers``); returns the new version.

    Each ledger must be closed and not in the list yet, and the log's last ledger must be
    closed too: a log never holds a ledger after one that is still being written, so readers
    keep seeing a prefix.  (Recover a dead writer's ledger with ``open_ledger`` first.)  A log
    writer still active on the log loses its next roll's CAS and is fenced: link only logs
    that have no writer, or that the linking process writes itself.

    Raises:
        BadVersionError: the list changed (or the log was deleted) since ``version``; nothing
            was linked.
        InvalidArgumentError: a ledger is open, already listed, or the log's tail is open.
        NoSuchLogError, NoSuchLedgerError.
    """
    ledger_ids = [int(x) for x in ledger_ids]
    ledgers, ctime_ms, current = _read_record(bk, name)
    if current != version:
        raise BadVersionError(f"log {name}: the ledger list is at version {current}, not "
                              f"{version}; nothing was linked")
    if len(set(ledger_ids)) != len(ledger_ids) or set(ledger_ids) & set(ledgers):
        raise InvalidArgumentError(f"log {name}: ledgers {ledger_ids} repeat one another or "
                                   f"one already in the log")
    for lid in ledgers[-1:] + ledger_ids:
        state = bk.ledger_metadata(lid).state
        if state != "CLOSED":
            raise InvalidArgumentError(f"log {name}: ledger {lid} is {state}, not closed; "
                                       f"only closed ledgers are linked, after a closed tail")
    try:
        return bk.write_record(log_path(name), encode_record(ledgers + ledger_ids, ctime_ms),
                               version)
    except NoSuchRecordError:
        raise BadVersionError(f"log {name} was deleted; nothing was linked") from None


# ---- asyncio ------------------------------------------------------------------------------------

async def open_log_async(abk, name: str, *args, **kwargs) -> "AsyncLogWriter":
    """``open_log`` for an ``AsyncBookKeeper``; the metadata and recovery steps run on a
    worker thread."""
    return AsyncLogWriter(await asyncio.to_thread(open_log, abk.sync, name, *args, **kwargs))


class AsyncLogWriter:
    """asyncio view of a ``LogWriter`` (``sync`` is the writer itself)."""

    def __init__(self, writer: LogWriter):
        self.sync = writer
        self.name = writer.name

    async def append(self, data) -> LogPosition:
        if self.sync.append_may_block:
            fut = await asyncio.to_thread(self.sync.append_async, data)  # may roll or throttle
        else:
            fut = self.sync.append_async(data)
        return await asyncio.wrap_future(fut)

    async def roll(self) -> int:
        return await asyncio.to_thread(self.sync.roll)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


async def read_log_async(abk, name: str, start=None, digest=None,
                         password=None) -> AsyncIterator[LogRecord]:
    """``read_log`` as an async iterator (each chunk is fetched on a worker thread)."""
    it = await asyncio.to_thread(read_log, abk.sync, name, start, digest, password)
    done = object()
    while True:
        rec = await asyncio.to_thread(next, it, done)
        if rec is done:
            return
        yield rec
