"""The journal: on-disk format, writer, scanner (replay) and LastLogMark.

When a group is written is decided by bookie.core.group_commit.

On-disk format (journal format 3)
---------------------------------
Files ``{journal_id:016x}.txn`` in the journal directory; ids grow by one per file.  Each file
opens with a 64-byte header, then holds *groups* back to back, then zeros (files are
preallocated in ``journalPreAllocSizeMB`` steps)::

    file header (64 bytes, little-endian)
      0   8  magic          b"BKJRNL03"  (b"BKJRNL02", format 2, is still read: see below;
                                                b"BKJRNL01", format 1, is refused)
      8   8  journal_id     u64
      16  8  start          u64 logical offset of the first group
      24  8  salt           u64 random, drawn when the file is created; it never leaves the file
      32  4  header_crc     crc32 of bytes 0..32
      36  28 zero

    group header (32 bytes, little-endian)
      0   4  magic          b"JGRP"
      4   4  body_len       u32 (> 0)
      8   8  start          u64 logical offset of the body's first byte
      16  8  salt           u64 the salt of the file the group is in
      24  4  body_crc       CRC-32C (Castagnoli) of the body; in format 2 files, zlib's CRC-32
      28  4  header_crc     crc32 of bytes 0..28
    body: ``body_len`` bytes = ring bytes [start, start + body_len): whole records
    (see bookie.storage.records).

Format 3 differs from format 2 only in the body's CRC: CRC-32C, which the processor computes
(12 GB/s on the benchmark machine against zlib's CRC-32 at 1.5 GB/s: at 200 MB/s of adds that was
a seventh of a core in the journal process).  A format 2 file (left by the release before, e.g.
by a crash just before an upgrade) is scanned and replayed with zlib's CRC-32, as written; the
writer writes format 3 only.  The headers' own CRCs are zlib's in both.

Groups of one journal are contiguous in logical offsets, within a file and across files.  A
group is written with one ``writev`` straight from the shared-memory ring and made durable by
one ``fdatasync``; only then is anything in it acknowledged, and only then is the next group
written.  A new file's header is made durable (file and directory synced) before any group goes
into it; a file is never written again once the writer has moved on (after a restart too: the
writer always opens a new file).

Why the salt: a group's body is client data, and a client can send entries whose bytes look
exactly like groups.  A scan that met such bytes after a torn write could take them for groups
written later, and so take a crash for damage in the middle.  A group counts only if it carries
its file's salt, which no client ever sees: no payload can pass for a group (short of guessing
64 random bits).  Bytes copied from elsewhere in the same file would claim an earlier logical
offset, and only a group past the damage counts.

What a crash leaves, and how a scan reads it
--------------------------------------------
A crash can only tear the group being written: any part of it (its header, any page of its body)
may be missing, or zero where the file was preallocated.  The scan walks the groups from the
file header.  Where the next group does not check out (zeros, a bad header or body, a file cut
short):

- no whole group with this file's salt and a logical offset past this point anywhere after it:
  a torn tail, or the end of written data.  Nothing in it was acknowledged; the scan stops.
- such a group after it: that group was written after this one was durable, so this is damage
  in the middle.  The scan refuses with ``CorruptJournalError`` naming the file and offset; the
  bookie does not start.
- a whole group with this file's salt right there but the wrong logical offset: also refused.

A file whose header is unreadable and that holds nothing but zeros after it was torn while
being created: it holds no group, and is passed over with a warning.

Files before LastLogMark
------------------------
A file is *wholly before* a logical offset ``m`` when a later file (with a readable header)
starts at or before ``m``.  Replay from LastLogMark reads only the files that are not wholly
before it; those must continue each other's logical offsets exactly (else ``CorruptJournalError``:
"not contiguous").  The files wholly before it are backups that are never replayed: damage in
them is a warning naming the file, never a refusal to start.  A file of journal format 1 is
refused (``JournalFormatError``) when replay needs it, and is a warning otherwise.

LastLogMark
-----------
A logical offset, persisted in ``lastMark`` in every ledger directory (with several journals,
each has its own: ``lastMark.i`` for journal ``i`` > 0, bookie.storage.journal_set) (16 bytes: u64 mark, u32
crc32, u32 zero; written to a temp file, fsynced, renamed, directory fsynced).  Everything
before it is in synced entry logs and a synced index, so replay starts there, and journal files
wholly before it are only kept as ``journalMaxBackups`` backups.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import time
import zlib
from typing import NamedTuple

import crc32c

from bookie.storage.journal_set import lastmark_name
from bookie.storage.replace_file import fsync_dir, replace_file  # noqa: F401 - fsync_dir: its users import it from here

FILE_MAGIC = b"BKJRNL03"
# magic -> (journal format, CRC of a group's body) of the files this code reads
READ_FORMATS = {FILE_MAGIC: (3, crc32c.crc32c), b"BKJRNL02": (2, zlib.crc32)}
OLD_FILE_MAGICS = {b"BKJRNL01": 1}  # magic -> journal format this code cannot read
_BODY_CRC = {fmt: crc for fmt, crc in READ_FORMATS.values()}
_WRITE_CRC = READ_FORMATS[FILE_MAGIC][1]  # the body CRC of the format written
FILE_HEADER = struct.Struct("<8sQQQI")
FILE_HEADER_CRC_END = 32
FILE_HEADER_SIZE = 64
GROUP_MAGIC = b"JGRP"
GROUP_HEADER = struct.Struct("<4sIQQII")
GROUP_HEADER_CRC_END = 28
GROUP_HEADER_SIZE = GROUP_HEADER.size  # 32
_SALT = struct.Struct("<Q")
_GROUP_SALT_AT = 16
_NAME = re.compile(r"^([0-9a-f]{16})\.txn$")
LASTMARK = struct.Struct("<QII")


class CorruptJournalError(RuntimeError):
    """Damage the bookie must not start on (junk in the middle of what replay needs)."""


class JournalFormatError(CorruptJournalError):
    """A journal file in a format this code cannot read (written by an older release)."""


def journal_name(journal_id: int) -> str:
    return f"{journal_id:016x}.txn"


def list_journals(directory: str) -> list[int]:
    """Journal ids in ``directory``, ascending."""
    ids = []
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m:
            ids.append(int(m.group(1), 16))
    return sorted(ids)


def pack_file_header(journal_id: int, start: int, salt: int) -> bytes:
    head = FILE_HEADER.pack(FILE_MAGIC, journal_id, start, salt, 0)[:FILE_HEADER_CRC_END]
    return (head + struct.pack("<I", zlib.crc32(head))).ljust(FILE_HEADER_SIZE, b"\0")


def pack_group_header(start: int, body_len: int, body_crc: int, salt: int) -> bytes:
    head = GROUP_HEADER.pack(GROUP_MAGIC, body_len, start, salt, body_crc, 0)[:GROUP_HEADER_CRC_END]
    return head + struct.pack("<I", zlib.crc32(head))


def crc_of(parts) -> int:
    """The body CRC of a format 3 group made of ``parts``."""
    crc = 0
    for p in parts:
        crc = _WRITE_CRC(p, crc)
    return crc


# ---- scanning one file ---------------------------------------------------------------------------

class FileHeader(NamedTuple):
    journal_id: int
    start: int  # logical offset of the file's first group
    salt: int
    format: int = 3  # journal format (READ_FORMATS)

    @property
    def body_crc(self):
        """The CRC function of this file's group bodies."""
        return _BODY_CRC[self.format]


@dataclasses.dataclass
class Group:
    journal_id: int
    file_offset: int  # of the group header
    start: int  # logical offset of the body
    body: memoryview

    @property
    def end(self) -> int:
        return self.start + len(self.body)


def read_file_header(path: str, buf) -> FileHeader:
    """The header of journal file ``path`` from its first bytes ``buf``.

    Raises:
        JournalFormatError: the file is in an older journal format.
        CorruptJournalError: the header is cut short or does not check out.
    """
    magic = bytes(buf[:8])
    if magic in OLD_FILE_MAGICS:
        raise JournalFormatError(
            f"journal {path}: journal format {OLD_FILE_MAGICS[magic]}, written by an older "
            f"release; this bookie reads formats 2 and 3 only and cannot replay it (wipe the bookie "
            f"with 'bookie shell bookieformat --force' and let its ledgers be re-replicated)")
    if len(buf) < FILE_HEADER_SIZE:
        raise CorruptJournalError(f"journal {path}: file header cut short")
    magic, journal_id, start, salt, crc = FILE_HEADER.unpack_from(buf, 0)
    if magic not in READ_FORMATS or zlib.crc32(bytes(buf[:FILE_HEADER_CRC_END])) != crc:
        raise CorruptJournalError(f"journal {path}: bad file header")
    return FileHeader(journal_id, start, salt, READ_FORMATS[magic][0])


def _group_at(mv: memoryview, off: int, salt: int, body_crc=_WRITE_CRC):
    """(start, body) of the group at ``off`` if it carries ``salt`` and checks out (its body by
    ``body_crc``, the file format's), else None."""
    if off + GROUP_HEADER_SIZE > len(mv):
        return None
    magic, body_len, start, group_salt, want_crc, header_crc = GROUP_HEADER.unpack_from(mv, off)
    if magic != GROUP_MAGIC or group_salt != salt or body_len == 0:
        return None
    if zlib.crc32(mv[off:off + GROUP_HEADER_CRC_END]) != header_crc:
        return None
    body_at = off + GROUP_HEADER_SIZE
    if body_at + body_len > len(mv):
        return None
    body = mv[body_at:body_at + body_len]
    if body_crc(body) != want_crc:
        return None
    return start, body


def _later_group(buf: bytes, mv: memoryview, off: int, salt: int, after: int,
                 body_crc=_WRITE_CRC) -> int | None:
    """Offset of a whole group after ``off`` with this file's salt and a logical start past
    ``after``: proof that the writer went on past ``off``, so the damage there is no torn tail.

    Only the salt makes this safe: a client's entry can hold bytes that look like a group, but
    never the salt of the file it lands in.
    """
    salt_bytes = _SALT.pack(salt)
    pos = off
    while True:
        pos = buf.find(GROUP_MAGIC, pos + 1)
        if pos < 0:
            return None
        if buf[pos + _GROUP_SALT_AT:pos + _GROUP_SALT_AT + 8] != salt_bytes:
            continue
        found = _group_at(mv, pos, salt, body_crc)
        if found is not None and found[0] > after:
            return pos


def scan_file(path: str):
    """Yield the whole groups of one journal file, in order; stop at a torn tail or at the end
    of written data.

    Raises:
        CorruptJournalError: a damaged group followed by one the writer wrote later, a group
            that does not continue the logical offsets, or a bad file header.
        JournalFormatError: the file is in an older journal format.
    """
    with open(path, "rb") as f:
        buf = f.read()
    header = read_file_header(path, buf)
    mv = memoryview(buf)
    off = FILE_HEADER_SIZE
    expect = header.start
    while True:
        found = _group_at(mv, off, header.salt, header.body_crc)
        if found is None:
            later = _later_group(buf, mv, off, header.salt, expect, header.body_crc)
            if later is not None:
                zeros = not buf[off:off + GROUP_HEADER_SIZE].strip(b"\0")
                what = "zeros" if zeros else "a damaged group"
                raise CorruptJournalError(
                    f"journal {path}: {what} at offset {off} followed by a valid group at offset "
                    f"{later}: junk in the middle, not a torn tail")
            return  # a torn tail (never acknowledged) or the end of written data
        start, body = found
        if start != expect:
            raise CorruptJournalError(
                f"journal {path}: the group at offset {off} holds logical offset {start}, "
                f"but {expect} was expected there")
        yield Group(header.journal_id, off, start, body)
        expect = start + len(body)
        off += GROUP_HEADER_SIZE + len(body)


def _torn_at_creation(path: str) -> bool:
    """True when ``path`` holds nothing but zeros after its header: a file whose header did not
    reach the disk before a crash (no group is ever written before the header is synced)."""
    try:
        with open(path, "rb") as f:
            f.seek(FILE_HEADER_SIZE)
            while chunk := f.read(1 << 20):
                if chunk.strip(b"\0"):
                    return False
    except FileNotFoundError:
        pass
    return True


# ---- scanning a journal directory ------------------------------------------------------------------

@dataclasses.dataclass
class JournalFile:
    journal_id: int
    path: str
    header: FileHeader | None  # None when unreadable: ``problem`` says why
    problem: CorruptJournalError | None = None


def journal_files(directory: str) -> list[JournalFile]:
    """The journal files of ``directory`` with their headers, ascending; files deleted meanwhile
    (only files wholly before every LastLogMark ever are) are left out."""
    out = []
    for jid in list_journals(directory):
        path = os.path.join(directory, journal_name(jid))
        try:
            with open(path, "rb") as f:
                head = f.read(FILE_HEADER_SIZE)
        except FileNotFoundError:
            continue
        try:
            out.append(JournalFile(jid, path, read_file_header(path, head)))
        except CorruptJournalError as e:
            out.append(JournalFile(jid, path, None, e))
    return out


def first_needed(files: list[JournalFile], mark: int) -> int:
    """Index of the first file a replay from ``mark`` reads: every file before it is wholly
    before the mark (a later file with a readable header starts at or before it)."""
    first = 0
    for i, f in enumerate(files):
        if f.header is not None and f.header.start <= mark:
            first = i
    return first


@dataclasses.dataclass
class JournalCheck:
    end: int  # logical offset where the next group goes
    warnings: list[str]  # damage replay does not need, one line each, naming the file


class _Walk:
    """Walks the groups of the files replay needs, checking that they continue each other."""

    def __init__(self, files: list[JournalFile], from_offset: int):
        self.files = files
        self.from_offset = from_offset
        self.end = 0
        self.warnings: list[str] = []

    def groups(self):
        prev_end = None
        for f in self.files:
            if f.header is None:
                if isinstance(f.problem, JournalFormatError) or not _torn_at_creation(f.path):
                    raise f.problem
                self.warnings.append(f"journal {f.path}: torn while being created (no readable "
                                     f"header, nothing after it); it holds no group: passed over")
                continue
            start = f.header.start
            if prev_end is not None and start != prev_end:
                raise CorruptJournalError(
                    f"journal {f.path}: starts at logical offset {start}, but the previous "
                    f"journal ends at {prev_end}: the journal is not contiguous")
            self.end = max(self.end, start)
            try:
                for g in scan_file(f.path):
                    self.end = g.end
                    yield g
            except FileNotFoundError:
                # Deleted by the journal worker meanwhile: only files wholly before every
                # LastLogMark are deleted, and a replay starts at a mark, so nothing is missed.
                if start >= self.from_offset:
                    raise
                prev_end = None
                continue
            prev_end = self.end


def scan(directory: str, from_offset: int = 0):
    """Yield every whole group whose end is past ``from_offset``, across files, in order.

    Files wholly before ``from_offset`` are not read (damage in them cannot stop a replay).

    Raises:
        CorruptJournalError: as ``scan_file``, or a gap in logical offsets between files.
    """
    files = journal_files(directory)
    walk = _Walk(files[first_needed(files, from_offset):], from_offset)
    for g in walk.groups():
        if g.end > from_offset:
            yield g


def _backup_warnings(files: list[JournalFile], mark: int) -> list[str]:
    """Damage in files wholly before ``mark`` (backups, never replayed), one line per file."""
    warnings = []
    for f in files:
        try:
            if f.header is None:
                if isinstance(f.problem, JournalFormatError) or not _torn_at_creation(f.path):
                    raise f.problem
                continue  # torn while being created: holds nothing
            for _ in scan_file(f.path):
                pass
        except FileNotFoundError:
            continue  # deleted meanwhile, as backups are
        except CorruptJournalError as e:
            warnings.append(f"{e}; the file is wholly before LastLogMark {mark} (a backup, "
                            f"never replayed): ignored")
    return warnings


def check_journal(directory: str, mark: int) -> JournalCheck:
    """Read the journal as a start-up must: every file replay from LastLogMark ``mark`` needs,
    group by group, and the backups before it.

    Returns:
        where the next group goes, and warnings (damage in backups, files torn at creation).
    Raises:
        CorruptJournalError: damage in what replay needs (it would lose acknowledged adds).
        JournalFormatError: replay needs a file of an older journal format.
    """
    files = journal_files(directory)
    first = first_needed(files, mark)
    warnings = _backup_warnings(files[:first], mark)
    walk = _Walk(files[first:], mark)
    for _ in walk.groups():
        pass
    return JournalCheck(walk.end, warnings + walk.warnings)


def sync_journal(directory: str, mark: int) -> list[str]:
    """fdatasync every journal file a replay from ``mark`` reads, then the directory; returns
    their paths.

    A journal worker killed between a group's write and its fdatasync leaves the group whole
    in the page cache: the next worker's scan finds it and would count it durable, and a
    machine crash would then lose what was acknowledged on that count.  A journal worker calls
    this after its scan and before it publishes anything as durable.
    """
    files = journal_files(directory)
    synced = []
    for f in files[first_needed(files, mark):]:
        try:
            fd = os.open(f.path, os.O_RDONLY)
        except FileNotFoundError:
            continue  # deleted meanwhile: wholly before every LastLogMark, nothing to keep
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        synced.append(f.path)
    fsync_dir(directory)
    return synced


def journal_end(directory: str, mark: int = 0) -> int:
    """Logical offset where the next group goes: end of the last whole group (0 if none)."""
    return check_journal(directory, mark).end


# ---- LastLogMark ---------------------------------------------------------------------------------

def write_lastmark(directory: str, mark: int, journal: int = 0) -> None:
    """Persist journal ``journal``'s LastLogMark in ledger directory ``directory``."""
    path = os.path.join(directory, lastmark_name(journal))
    head = struct.pack("<Q", mark)
    replace_file(path, LASTMARK.pack(mark, zlib.crc32(head), 0))  # never through a link


def read_lastmark(directory: str, journal: int = 0) -> int:
    """Journal ``journal``'s persisted LastLogMark in a ledger directory; 0 when none (or
    unreadable: replay all)."""
    try:
        with open(os.path.join(directory, lastmark_name(journal)), "rb") as f:
            raw = f.read()
        mark, crc, _ = LASTMARK.unpack(raw)
    except (OSError, struct.error):
        return 0
    return mark if zlib.crc32(struct.pack("<Q", mark)) == crc else 0


def lastmark_of(directories: list[str], journal: int = 0) -> int:
    """Replay of journal ``journal`` must start at its lowest mark of all ledger directories."""
    return min(read_lastmark(d, journal) for d in directories)


# ---- writing -------------------------------------------------------------------------------------

_ZERO_CHUNK_BYTES = 1 << 20
# groups averaging less than this over a preallocation step: the next step is written as zeros
# (JournalWriter._preallocate says why)
PREWRITE_BELOW_BYTES = 16 * 1024


def prewrite_zeros(fd: int, start: int, end: int) -> None:
    """Write zeros into ``fd`` over [start, end) (no sync): space whose later writes change no
    extent.  Raises OSError (a full disk) with whatever was written left in place."""
    zeros = bytes(min(_ZERO_CHUNK_BYTES, max(end - start, 0)))
    while start < end:
        start += os.pwrite(fd, memoryview(zeros)[:end - start], start)


class JournalWriter:
    """Appends groups to journal files in one directory: roll, preallocate, fdatasync.

    Invariant: ``append`` returns only after the group is on disk (fdatasync returned), and a
    new file is durable (its directory fsynced) before any group in it is counted durable.
    """

    def __init__(self, directory: str, start: int, max_size_bytes: int, prealloc_bytes: int):
        self.directory = directory
        self.max_size = max_size_bytes
        self.prealloc = prealloc_bytes
        self.position = start  # logical end of what is written
        ids = list_journals(directory)
        self._next_id = (ids[-1] + 1) if ids else 1
        self._fd = -1
        self._file_off = 0
        self._alloc_end = 0
        self._salt = 0
        self.journal_id = 0
        self.syncs = 0
        self.bytes_written = 0
        self.last_sync_s = 0.0  # duration of the last group's fdatasync (metrics)
        self._step_syncs = self._step_bytes = 0  # syncs, bytes_written at the last step
        self.syncing = False  # in an fdatasync: an error there is fatal (``abandon``)

    def _open_new(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1  # never closed twice: a failed open below leaves no stale number
        jid = self._next_id
        self._next_id += 1
        path = os.path.join(self.directory, journal_name(jid))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            # A fresh salt per file: only the writer knows it, so no client payload can pass
            # for one of this file's groups (see "Why the salt" above).
            self._salt = _SALT.unpack(os.urandom(_SALT.size))[0]
            os.pwrite(fd, pack_file_header(jid, self.position, self._salt), 0)
            self._fd, self._file_off, self._alloc_end = fd, FILE_HEADER_SIZE, 0
            self._preallocate(FILE_HEADER_SIZE)  # on the new file (it reads self._fd)
            os.fdatasync(fd)
            fsync_dir(self.directory)
        except OSError:
            # No file at all rather than a torn one (no room on the disk: ``abandon``, then a
            # retry makes the same file again).
            os.close(fd)
            self._fd = -1
            self._next_id = jid
            try:
                os.unlink(path)
                fsync_dir(self.directory)
            except OSError:
                pass
            raise
        self._fd = fd
        self._file_off = FILE_HEADER_SIZE
        self.journal_id = jid

    def _preallocate(self, need_end: int) -> None:
        """Make the file at least ``need_end`` long, ``prealloc`` bytes at a time, past the
        written data (never over it): written zeros while groups are small, ``posix_fallocate``
        while they are large.

        Why both: an fallocated range is *unwritten* extents, and the first write into each
        block converts it, a metadata change that the group's fdatasync must then commit through
        the filesystem's own journal (ext4: 76-96 us a sync against 52-57 on a pre-written
        file, issue 34): a cost per group, which lone adds pay in full.  Written zeros cost
        their own write and write-back instead (once per step, on the next group's fdatasync):
        a cost per byte, which a full-rate writer pays in full (measured: the journal busy
        writing zeros 71% of its time, adds/s down a quarter).  So the step is written as zeros
        when the last step's groups averaged under PREWRITE_BELOW_BYTES (many syncs per step),
        and fallocated otherwise.  A writer's first step (nothing measured yet) is zeros, so
        lone adds gain from the first one: at a start that writes and syncs one step of zeros
        (4-16 ms for 4-16 MB on the benchmark machine's disk).  Past the data the file reads as zeros either way, which the
        scan takes as the end of written data.  An error here (a full disk, no fallocate) is
        left to the group's own write to meet.
        """
        while self._alloc_end < need_end:
            start = max(self._alloc_end, self._file_off)
            end = self._alloc_end + self.prealloc
            groups = self.syncs - self._step_syncs
            small = groups == 0 or \
                (self.bytes_written - self._step_bytes) < PREWRITE_BELOW_BYTES * groups
            self._step_syncs, self._step_bytes = self.syncs, self.bytes_written
            try:
                if small:
                    prewrite_zeros(self._fd, start, end)
                else:
                    os.posix_fallocate(self._fd, start, end - start)
            except OSError:
                return
            self._alloc_end = end

    def append(self, parts: list) -> int:
        """Write ring slices ``parts`` (the logical bytes from ``self.position`` on) as one
        group and make it durable.  Returns the new logical end."""
        body_len = sum(len(p) for p in parts)
        if self._fd < 0 or self._file_off + GROUP_HEADER_SIZE + body_len > self.max_size:
            self._open_new()
        header = pack_group_header(self.position, body_len, crc_of(parts), self._salt)
        end_off = self._file_off + GROUP_HEADER_SIZE + body_len
        self._preallocate(end_off)
        written = os.pwritev(self._fd, [header, *parts], self._file_off)
        if written != GROUP_HEADER_SIZE + body_len:
            # Short write: finish it; the group is acknowledged only once whole.
            data = b"".join([header, *(bytes(p) for p in parts)])
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], self._file_off + written)
        synced_at = time.perf_counter()
        self.syncing = True
        os.fdatasync(self._fd)
        self.syncing = False
        self.last_sync_s = time.perf_counter() - synced_at
        self.syncs += 1
        self.bytes_written += body_len
        self._file_off = end_off
        self.position += body_len
        return self.position

    def abandon(self) -> None:
        """After a *write* of a group failed for want of space (never after a failed
        fdatasync: the kernel may have dropped the pages and forgotten the error): leave the
        file as it is, its torn last group past ``position`` as a crash leaves it, and write
        the next group, from ``position`` again, in a new file (``append``).  Replay and the
        start-up scan read a file up to its last whole group, then the next file from its
        start offset (the same as after a journal killed mid-write)."""
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def delete_old_journals(directory: str, mark: int, keep_backups: int, current_id: int) -> list[int]:
    """Delete journal files wholly before ``mark`` (a later file starts at or before it),
    keeping the newest ``keep_backups`` of them and never the file being written.

    Returns the ids deleted.
    """
    files = journal_files(directory)
    old = [f.journal_id for f in files[:first_needed(files, mark)] if f.journal_id != current_id]
    doomed = old[:max(0, len(old) - keep_backups)]
    for jid in doomed:
        try:
            os.unlink(os.path.join(directory, journal_name(jid)))
        except FileNotFoundError:
            pass
    if doomed:
        fsync_dir(directory)
    return doomed
