"""The journal: on-disk format, writer, scanner (replay) and LastLogMark.

When a group is written is decided by bookie.workers.group_commit.

On-disk format
--------------
Files ``{journal_id:016x}.txn`` in the journal directory; ids grow by one per file.  Each file
opens with a 64-byte header, then holds *groups* back to back, then zeros (files are
preallocated in ``journalPreAllocSizeMB`` steps)::

    file header (64 bytes, little-endian)
      0   8  magic          b"BKJRNL01"
      8   8  journal_id     u64
      16  8  start          u64 logical offset of the first group
      24  4  header_crc     crc32 of bytes 0..24
      28  36 zero

    group header (24 bytes, little-endian)
      0   4  magic          b"JGRP"
      4   4  body_len       u32 (> 0)
      8   8  start          u64 logical offset of the body's first byte
      16  4  body_crc       crc32 of the body
      20  4  header_crc     crc32 of bytes 0..20
    body: ``body_len`` bytes = ring bytes [start, start + body_len): whole records
    (see bookie.workers.records).

Groups of one journal are contiguous in logical offsets, within a file and across files.  A
group is written with one ``writev`` straight from the shared-memory ring and made durable by
one ``fdatasync``; only then is anything in it acknowledged.

What a crash leaves, and how a scan reads it
--------------------------------------------
- Zeros where a group header should be: end of written data (preallocated tail).
- A group whose header or body check fails, with no valid group anywhere after it in the file:
  a torn write at the tail.  Nothing in it was acknowledged; the scan stops there.
- A group that fails its checks *followed by* a valid group, or a file whose first group does
  not continue the previous file's logical offsets: corruption in the middle.  The scan refuses
  with ``CorruptJournalError`` naming the file and offset; the bookie does not start.

LastLogMark
-----------
A logical offset, persisted in ``lastMark`` in every ledger directory (16 bytes: u64 mark, u32
crc32, u32 zero; written to a temp file, fsynced, renamed, directory fsynced).  Everything
before it is in synced entry logs and a synced index, so replay starts there, and journal files
that end before it are only kept as ``journalMaxBackups`` backups.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
import zlib

FILE_MAGIC = b"BKJRNL01"
FILE_HEADER = struct.Struct("<8sQQI")
FILE_HEADER_SIZE = 64
GROUP_MAGIC = b"JGRP"
GROUP_HEADER = struct.Struct("<4sIQII")
GROUP_HEADER_SIZE = GROUP_HEADER.size  # 24
_NAME = re.compile(r"^([0-9a-f]{16})\.txn$")
LASTMARK = struct.Struct("<QII")


class CorruptJournalError(RuntimeError):
    """Junk in the middle of a journal: the bookie must not start on it."""


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


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pack_group_header(start: int, body_len: int, body_crc: int) -> bytes:
    head = struct.pack("<4sIQI", GROUP_MAGIC, body_len, start, body_crc)
    return head + struct.pack("<I", zlib.crc32(head))


def crc_of(parts) -> int:
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return crc


# ---- scanning ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Group:
    journal_id: int
    file_offset: int  # of the group header
    start: int  # logical offset of the body
    body: memoryview

    @property
    def end(self) -> int:
        return self.start + len(self.body)


def _valid_group_at(buf, off: int):
    """The group at ``off`` if its header and body check out, else None."""
    if off + GROUP_HEADER_SIZE > len(buf):
        return None
    magic, body_len, start, body_crc, header_crc = GROUP_HEADER.unpack_from(buf, off)
    if magic != GROUP_MAGIC or body_len == 0:
        return None
    if zlib.crc32(buf[off:off + 20]) != header_crc:
        return None
    body_at = off + GROUP_HEADER_SIZE
    if body_at + body_len > len(buf):
        return None
    body = buf[body_at:body_at + body_len]
    if zlib.crc32(body) != body_crc:
        return None
    return start, body


def _later_valid_group(buf, off: int) -> int | None:
    """Offset of a valid group after ``off``, if any: proof the damage is not a torn tail."""
    pos = off + 1
    while True:
        pos = buf.find(GROUP_MAGIC, pos)
        if pos < 0:
            return None
        if _valid_group_at(buf, pos) is not None:
            return pos
        pos += 1


def read_file_header(path: str, buf) -> tuple[int, int]:
    if len(buf) < FILE_HEADER_SIZE:
        raise CorruptJournalError(f"journal {path}: file header cut short")
    magic, journal_id, start, crc = FILE_HEADER.unpack_from(buf, 0)
    if magic != FILE_MAGIC or zlib.crc32(bytes(buf[:24])) != crc:
        raise CorruptJournalError(f"journal {path}: bad file header")
    return journal_id, start


def scan_file(path: str):
    """Yield the valid groups of one journal file, in order; stop at the end of written data.

    Raises:
        CorruptJournalError: a damaged group followed by a valid one, or a bad file header.
    """
    with open(path, "rb") as f:
        buf = f.read()
    journal_id, start = read_file_header(path, buf)
    mv = memoryview(buf)
    off = FILE_HEADER_SIZE
    expect = start
    while off + GROUP_HEADER_SIZE <= len(buf):
        if buf[off:off + GROUP_HEADER_SIZE] == b"\0" * GROUP_HEADER_SIZE:
            later = _later_valid_group(buf, off)
            if later is not None:
                raise CorruptJournalError(
                    f"journal {path}: zeros at offset {off} followed by a valid group at {later}")
            return
        found = _valid_group_at(buf, off)
        if found is None or found[0] != expect:
            later = _later_valid_group(buf, off)
            if later is not None:
                raise CorruptJournalError(
                    f"journal {path}: damaged group at offset {off} followed by a valid group "
                    f"at offset {later}; refusing to replay past junk in the middle")
            return  # torn tail: never acknowledged
        gstart, body = found
        yield Group(journal_id, off, gstart, mv[off + GROUP_HEADER_SIZE:off + GROUP_HEADER_SIZE + len(body)])
        expect = gstart + len(body)
        off += GROUP_HEADER_SIZE + len(body)


def scan(directory: str, from_offset: int = 0):
    """Yield every valid group whose end is past ``from_offset``, across files, in order.

    Raises:
        CorruptJournalError: as ``scan_file``, or a gap in logical offsets between files.
    """
    prev_end = None
    for jid in list_journals(directory):
        path = os.path.join(directory, journal_name(jid))
        try:
            with open(path, "rb") as f:
                head = f.read(FILE_HEADER_SIZE)
        except FileNotFoundError:
            # Deleted by the journal worker meanwhile: only files wholly before every
            # LastLogMark are deleted, and a replay starts at a mark, so nothing is missed.
            prev_end = None
            continue
        _, start = read_file_header(path, head)
        if prev_end is not None and start != prev_end:
            raise CorruptJournalError(
                f"journal {path}: starts at logical offset {start}, but the previous "
                f"journal ends at {prev_end}: the journal is not contiguous")
        end = start
        try:
            for g in scan_file(path):
                end = g.end
                if g.end > from_offset:
                    yield g
        except FileNotFoundError:
            if start >= from_offset:
                raise
            prev_end = None
            continue
        prev_end = end


def journal_end(directory: str) -> int:
    """Logical offset where the next group goes: end of the last valid group (0 if none)."""
    end = 0
    for jid in list_journals(directory):
        path = os.path.join(directory, journal_name(jid))
        with open(path, "rb") as f:
            head = f.read(FILE_HEADER_SIZE)
        _, start = read_file_header(path, head)
        end = max(end, start)
        for g in scan_file(path):
            end = g.end
    return end


# ---- LastLogMark ---------------------------------------------------------------------------------

def write_lastmark(directory: str, mark: int) -> None:
    path = os.path.join(directory, "lastMark")
    tmp = path + ".tmp"
    head = struct.pack("<Q", mark)
    with open(tmp, "wb") as f:
        f.write(LASTMARK.pack(mark, zlib.crc32(head), 0))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)


def read_lastmark(directory: str) -> int:
    """The persisted LastLogMark of a ledger directory; 0 when none (or unreadable: replay all)."""
    try:
        with open(os.path.join(directory, "lastMark"), "rb") as f:
            raw = f.read()
        mark, crc, _ = LASTMARK.unpack(raw)
    except (OSError, struct.error):
        return 0
    return mark if zlib.crc32(struct.pack("<Q", mark)) == crc else 0


def lastmark_of(directories: list[str]) -> int:
    """Replay must start at the lowest mark of all ledger directories."""
    return min(read_lastmark(d) for d in directories)


# ---- writing -------------------------------------------------------------------------------------

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
        self.journal_id = 0
        self.syncs = 0
        self.bytes_written = 0

    def _open_new(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        jid = self._next_id
        self._next_id += 1
        path = os.path.join(self.directory, journal_name(jid))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        head = FILE_HEADER.pack(FILE_MAGIC, jid, self.position, 0)
        head = FILE_HEADER.pack(FILE_MAGIC, jid, self.position, zlib.crc32(head[:24]))
        head = head.ljust(FILE_HEADER_SIZE, b"\0")
        os.pwrite(fd, head, 0)
        self._alloc_end = 0
        self._fd = fd
        self._file_off = FILE_HEADER_SIZE
        self.journal_id = jid
        self._preallocate(FILE_HEADER_SIZE)
        os.fdatasync(fd)
        fsync_dir(self.directory)

    def _preallocate(self, need_end: int) -> None:
        while self._alloc_end < need_end:
            try:
                os.posix_fallocate(self._fd, self._alloc_end, self.prealloc)
            except OSError:
                return  # filesystems without fallocate: the file grows with each write
            self._alloc_end += self.prealloc

    def append(self, parts: list) -> int:
        """Write ring slices ``parts`` (the logical bytes from ``self.position`` on) as one
        group and make it durable.  Returns the new logical end."""
        body_len = sum(len(p) for p in parts)
        if self._fd < 0 or self._file_off + GROUP_HEADER_SIZE + body_len > self.max_size:
            self._open_new()
        header = pack_group_header(self.position, body_len, crc_of(parts))
        end_off = self._file_off + GROUP_HEADER_SIZE + body_len
        self._preallocate(end_off)
        written = os.pwritev(self._fd, [header, *parts], self._file_off)
        if written != GROUP_HEADER_SIZE + body_len:
            # Short write: finish it; the group is acknowledged only once whole.
            data = b"".join([header, *(bytes(p) for p in parts)])
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], self._file_off + written)
        os.fdatasync(self._fd)
        self.syncs += 1
        self.bytes_written += body_len
        self._file_off = end_off
        self.position += body_len
        return self.position

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def delete_old_journals(directory: str, mark: int, keep_backups: int, current_id: int) -> list[int]:
    """Delete journal files wholly before ``mark``, keeping ``keep_backups`` of them.

    A file is wholly before the mark when the *next* file starts at or before the mark.
    Returns the ids deleted.
    """
    ids = list_journals(directory)
    starts = {}
    for jid in ids:
        with open(os.path.join(directory, journal_name(jid)), "rb") as f:
            try:
                starts[jid] = read_file_header(directory, f.read(FILE_HEADER_SIZE))[1]
            except CorruptJournalError:
                starts[jid] = None
    old = [jid for i, jid in enumerate(ids[:-1])
           if jid != current_id and starts.get(ids[i + 1]) is not None and starts[ids[i + 1]] <= mark]
    doomed = old[:max(0, len(old) - keep_backups)]
    for jid in doomed:
        os.unlink(os.path.join(directory, journal_name(jid)))
    if doomed:
        fsync_dir(directory)
    return doomed
