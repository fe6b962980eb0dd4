"""Read-only walks over a bookie's files: entry logs record by record, journals record by record,
the index opened read-only (in a child process where damage could crash the reader), and the
CRC digests a bookie can check without a ledger's password.

Nothing here writes; every function may run beside a live bookie (the files it reads are only
ever appended to, and a torn tail reads as the end of data).  The formats are specified where
they are written: entry logs in ``bookie.storage.ledger_storage``, journals in
``bookie.storage.journal``, records in ``bookie.storage.records``.

Where an entry log's written data ends
--------------------------------------
An entry log is its header, then ADD_BATCH records back to back, then zeros (preallocated) or
the end of the file.  A scan stops at the first record that does not parse: zeros there are
the end of written data; anything else is a torn tail (a crash while appending: nothing in it
was acknowledged from this log, the journal holds it) or damage.  ``LogScan.stop`` says which,
so a tool can warn when non-zero bytes follow the point where the scan stopped.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import signal
import stat
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import crc32c
import lmdb
import orjson

from bookie import wire
from bookie.storage import records
from bookie.storage.journal import CorruptJournalError, journal_files, scan_file
from bookie.storage.layout import current_dir
from bookie.storage.index import MAX_ENTRY_ID, Index
from bookie.storage.entrylog import LOG_HEADER_SIZE, LOG_MAGIC, list_logs, log_name

_U64 = struct.Struct(">Q")


class InspectError(ValueError):
    """A file that is not what the caller asked to read (the message names it and why)."""


# ---- entry logs -------------------------------------------------------------------------------

def read_log_header(buf, path: str) -> int:
    """The log id in an entry log's header.

    Raises:
        InspectError: ``buf`` does not start with a valid entry-log header.
    """
    if len(buf) < LOG_HEADER_SIZE:
        raise InspectError(f"{path}: not an entry log (shorter than its {LOG_HEADER_SIZE}-byte "
                           f"header)")
    if bytes(buf[:8]) != LOG_MAGIC:
        raise InspectError(f"{path}: not an entry log (no {LOG_MAGIC.decode()} magic)")
    (log_id,) = struct.unpack_from("<I", buf, 8)
    (crc,) = struct.unpack_from("<I", buf, 12)
    if zlib.crc32(bytes(buf[:12])) != crc:
        raise InspectError(f"{path}: entry-log header fails its checksum")
    return log_id


@dataclasses.dataclass
class LogEntry:
    """One entry as it lies in an entry log."""

    ledger_id: int
    entry_id: int
    offset: int  # of the entry's first byte in the log file
    length: int
    recovery: bool  # written by a recovery add (the ledger was being recovered)
    master_key: bytes


@dataclasses.dataclass
class LogScan:
    """What a scan of one entry log found; filled in as the scan goes."""

    path: str
    log_id: int = 0
    size: int = 0  # file size in bytes
    end: int = LOG_HEADER_SIZE  # where the last whole record ends
    records: int = 0
    entries: int = 0
    stop: str = "end of file"  # why the scan stopped: "end of file", "zeros", or a problem

    @property
    def damaged(self) -> bool:
        return self.stop not in ("end of file", "zeros")


class EntryLogFile:
    """An entry log opened read-only (mmap).  A context manager."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.buf = memoryview(self._mm)
        try:
            self.log_id = read_log_header(self.buf, path)
        except InspectError:
            self.close()
            raise
        self.scan = LogScan(path, self.log_id, size)

    def __enter__(self) -> "EntryLogFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        buf, self.buf = getattr(self, "buf", None), memoryview(b"")
        if buf is not None:
            buf.release()
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self._f.close()

    def records(self) -> Iterator[tuple[int, records.Record]]:
        """Yield (offset, Record) of every whole record; ``self.scan`` says where and why the
        walk stopped."""
        buf, scan = self.buf, self.scan
        pos = LOG_HEADER_SIZE
        while True:
            if pos >= len(buf):
                scan.stop = "end of file"
                return
            try:
                rec = records.parse(buf, pos)
                if rec.size <= records.REC_HEADER_SIZE:
                    raise records.RecordError("an empty record has no place in an entry log")
            except (records.RecordError, ValueError, struct.error) as e:
                zeros = not bytes(buf[pos:pos + records.REC_HEADER_SIZE]).strip(b"\0")
                scan.stop = "zeros" if zeros else f"unreadable record at offset {pos}: {e}"
                return
            scan.records += 1
            scan.end = pos + rec.size
            yield pos, rec
            pos += rec.size

    def entries(self, rec: records.Record, pos: int) -> list[LogEntry]:
        """The entries of the ADD_BATCH record at ``pos``."""
        data_at = pos + rec.data_offset
        offsets, _, entry_ids = records.batch_entries(rec, self.buf, pos)
        recovery = bool(rec.flags & records.FLAG_RECOVERY)
        self.scan.entries += len(entry_ids)
        return [LogEntry(rec.ledger_id, int(e), data_at + int(o), int(n), recovery, rec.master_key)
                for e, o, n in zip(entry_ids.tolist(), offsets.tolist(), rec.lengths.tolist())]

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.buf[offset:offset + length])


def log_paths(ledger_dirs: list[str]) -> list[tuple[int, str]]:
    """(log_id, path) of every entry log in the ledger directories, ascending by id."""
    out = []
    for d in ledger_dirs:
        out.extend((log_id, os.path.join(d, log_name(log_id))) for log_id in list_logs(d))
    return sorted(out)


def entry_fields(entry: bytes) -> dict:
    """The header fields of a stored entry (see ``bookie.wire`` ENTRY FORMAT)."""
    ledger_id, entry_id, lac, length = wire.unpack_entry_header(entry)
    return {"ledger_id": ledger_id, "entry_id": entry_id, "lac": lac, "ledger_length": length}


# ---- journals ---------------------------------------------------------------------------------

@dataclasses.dataclass
class JournalRecord:
    journal_id: int
    position: int  # logical offset of the record (LastLogMark counts in these)
    record: records.Record
    body: memoryview  # the group's body; the record starts at ``at``
    at: int

    def entry_ids(self) -> list[int]:
        rec = self.record
        if rec.type != records.ADD_BATCH:
            return []
        return records.batch_entries(rec, self.body, self.at)[2].tolist()


def iter_journal(directory: str, warnings: list[str], journal_id: int | None = None
                 ) -> Iterator[JournalRecord]:
    """Yield every record of every journal file in ``directory`` (or of one file), in order.

    Damage in a file ends that file's walk with a line in ``warnings``; the next file is read
    (a tool reads the backups too, which replay never needs).
    """
    for jf in journal_files(directory):
        if journal_id is not None and jf.journal_id != journal_id:
            continue
        if jf.header is None:
            warnings.append(str(jf.problem))
            continue
        try:
            for group in scan_file(jf.path):
                for at, rec in records.iter_records(group.body):
                    yield JournalRecord(jf.journal_id, group.start + at, rec, group.body, at)
        except FileNotFoundError:
            warnings.append(f"journal {jf.path}: deleted while being read (a backup)")
        except (CorruptJournalError, records.RecordError) as e:
            warnings.append(str(e))


# ---- the index, read-only --------------------------------------------------------------------

def index_path(conf) -> str:
    return os.path.join(current_dir(conf.index_dirs[0]), "index")


def ledger_dirs_of(conf) -> list[str]:
    return [current_dir(d) for d in conf.ledger_dirs]


def _plain(path: str, kind: int, owner: int | None) -> os.stat_result:
    """``lstat`` of ``path``: it must be of ``kind`` (no symbolic link) and, when given, of
    ``owner``.  Raises IndexUnreadable naming what is wrong."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise IndexUnreadable(f"{path} is a symbolic link: an index is opened only through its "
                              f"own files")
    if stat.S_IFMT(st.st_mode) != kind:
        raise IndexUnreadable(f"{path} is not a {'directory' if kind == stat.S_IFDIR else 'file'}")
    if owner is not None and st.st_uid != owner:
        raise IndexUnreadable(f"{path} belongs to uid {st.st_uid}, the index to uid {owner}: "
                              f"not opened")
    return st


def open_readonly(path: str, map_size: int) -> lmdb.Environment:
    """Open an index for reading only; safe beside a running bookie (LMDB readers never block
    its writer).

    Nothing is opened through a link, and nothing is left behind: the directory, ``data.mdb``
    and ``lock.mdb`` are checked with ``lstat`` (no link, their kind, one owner).  Where
    ``lock.mdb`` is missing no bookie has the index open (a running one holds it), and the
    environment is opened without a lock file (``lock=False``), so a reader run as another
    user never leaves a lock file the bookie could not open.

    Raises:
        IndexUnreadable: a link, a file of the wrong kind or owner (the message names it).
        lmdb.Error: LMDB cannot open it.
    """
    owner = _plain(path, stat.S_IFDIR, None).st_uid
    _plain(os.path.join(path, "data.mdb"), stat.S_IFREG, owner)
    try:
        _plain(os.path.join(path, "lock.mdb"), stat.S_IFREG, owner)
        locked = True
    except FileNotFoundError:
        locked = False
    return lmdb.open(path, map_size=map_size, max_dbs=8, readonly=True, lock=locked,
                     max_readers=64, subdir=True, create=False)


class IndexUnreadable(Exception):
    """The index is missing or cannot be opened; the message says which."""


def open_index_readonly(conf) -> tuple[lmdb.Environment, Index]:
    """The bookie's index, read-only.

    Raises:
        IndexUnreadable: no index, or LMDB cannot open it (the message names the path).
    """
    path = index_path(conf)
    if not os.path.lexists(os.path.join(path, "data.mdb")):
        raise IndexUnreadable(f"the index {path} does not exist")
    try:
        env = open_readonly(path, conf.index_map_size_bytes)
    except (lmdb.Error, FileNotFoundError) as e:
        raise IndexUnreadable(f"the index {path} cannot be opened: {e}") from None
    try:
        return env, Index(env)
    except lmdb.Error as e:
        env.close()
        raise IndexUnreadable(f"the index {path} is incomplete or damaged: {e}") from None


def in_child(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` run in a forked child; its result (orjson-able) comes back through a pipe.

    LMDB trusts the page numbers it reads, so a damaged file can crash the process reading it;
    a check must end in one line, not in a crash of the bookie's supervisor.  The child opens
    the environment itself (DESIGN: never carry one across fork) and only reads.

    Raises:
        IndexUnreadable: the child died (the message names the signal) or ``fn`` raised.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no return, whatever happens
        code = 1
        try:
            os.close(r)
            try:
                out = {"ok": fn()}
            except Exception as e:  # noqa: BLE001 - every failure becomes the parent's one line
                why = str(e) if isinstance(e, IndexUnreadable) else f"{type(e).__name__}: {e}"
                out = {"error": why}
            view = memoryview(orjson.dumps(out))
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise IndexUnreadable(f"{what} crashed the process reading it "
                              f"({signal.Signals(os.WTERMSIG(status)).name})")
    if not data:
        raise IndexUnreadable(f"{what} could not be read (exit status {os.WEXITSTATUS(status)})")
    out = orjson.loads(data)
    if "error" in out:
        raise IndexUnreadable(out["error"])
    return out["ok"]


def indexed_entries(index: Index, txn, ledger_id: int, first: int = 0,
                    last: int = MAX_ENTRY_ID) -> Iterator[tuple[int, tuple[int, int, int]]]:
    """(entry_id, (log_id, offset, length)) of the ledger's indexed entries first..last, in
    order (a striped ledger's bookie holds only its share: ids may skip)."""
    return index.entries_of(txn, ledger_id, first, last)


# ---- entry digests ----------------------------------------------------------------------------

def digest_kind(entry: bytes) -> str | None:
    """"crc32" or "crc32c" when the entry's digest is that CRC of its header and payload, else
    None (a MAC or no digest, which a bookie cannot check, or damage)."""
    if len(entry) < wire.ENTRY_HEADER_SIZE + 8:
        return None
    (stored,) = _U64.unpack_from(entry, wire.ENTRY_HEADER_SIZE)
    header, payload = entry[:wire.ENTRY_HEADER_SIZE], entry[wire.ENTRY_HEADER_SIZE + 8:]
    if crc32c.crc32c(payload, crc32c.crc32c(header)) == stored:
        return "crc32c"
    if zlib.crc32(payload, zlib.crc32(header)) == stored:
        return "crc32"
    return None
