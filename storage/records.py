"""Records: the unit the add worker places in the ring, the journal makes durable and the entry
log stores.  One format for all three, so bytes are written as they are, never re-encoded.

Record layout (little-endian)::

    0  4  body_len   u32, bytes after this 8-byte header
    4  1  type       1 ADD_BATCH, 2 FENCE, 3 LAC
    5  1  flags      bit 0 FLAG_RECOVERY: a recovery add (ADD_BATCH)
                     bit 1 FLAG_STORED_KEY: the key field is the stored form of the key
                     bit 2 FLAG_VERIFIED: (FENCE) its key was checked against the owner the
                           metadata store named, so it binds the ledger
                     bit 3 FLAG_OWNER_CHECK: the key field is the owner's ``key_check`` from the
                           metadata (a copy or fence on the recovery credential)
    6  2  key_len    u16, length of the key field that follows the type-specific header

    ADD_BATCH body:  ledger_id i64 | count u32 | pad u32 | master_key | lengths u32[count] | data
    FENCE body:      ledger_id i64 | master_key
    LAC body:        ledger_id i64 | lac i64 | master_key

``data`` holds the entries back to back exactly as the client formatted them (see
``bookie.wire``), so an entry's bytes inside a record are the bytes a read returns.  Every record
carries the ledger's master key in the form the bookie stores (``FLAG_STORED_KEY``: the one-way
``bookie.core.ledgers.stored_key``, never the key a client sends; records of older bookies
lack the flag and hold the raw key), or the owner's check: replaying the journal alone, or the
entry logs alone, rebuilds the ledger table (``bookie.core.ledgers``).  A FENCE with an empty key
fences a ledger no key has bound on this bookie.

The journal holds every record; an entry log holds every record of the ledgers of its
directory too (ADD_BATCH as placed, FENCE and LAC as placed, and compaction's restatements),
so that what the journal rolls away is still on disk when the index must be rebuilt.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from bookie.core.ledgers import (ADD_BATCH, FENCE, FLAG_OWNER_CHECK, FLAG_RECOVERY,  # noqa: F401 - the codes
                                 FLAG_STORED_KEY, FLAG_VERIFIED, LAC)
from bookie.wire import LENGTHS_DTYPE, batch_ids

REC_HEADER = struct.Struct("<IBBH")
REC_HEADER_SIZE = REC_HEADER.size  # 8
ADD_HEAD = struct.Struct("<qII")  # ledger_id, count, pad
FENCE_HEAD = struct.Struct("<q")
LAC_HEAD = struct.Struct("<qq")


class RecordError(ValueError):
    """A record whose header or sizes cannot be valid."""


def add_batch_parts(ledger_id: int, master_key: bytes, lengths_frame, data, recovery: bool = False,
                    flags: int | None = None):
    """The parts of an ADD_BATCH record, for a gather copy; returns (parts, size, data_offset).
    ``master_key`` and ``flags`` are what the rule book said the record carries
    (``bookie.core.ledgers.Placed``); without ``flags``, a stored key and ``recovery``.

    ``data_offset`` is where ``data`` starts inside the record.
    """
    if flags is None:
        flags = FLAG_STORED_KEY | (FLAG_RECOVERY if recovery else 0)
    count = len(lengths_frame) // 4
    body_len = ADD_HEAD.size + len(master_key) + len(lengths_frame) + len(data)
    head = REC_HEADER.pack(body_len, ADD_BATCH, flags, len(master_key)) + ADD_HEAD.pack(ledger_id, count, 0)
    data_offset = len(head) + len(master_key) + len(lengths_frame)
    return (head, master_key, lengths_frame, data), REC_HEADER_SIZE + body_len, data_offset


def fence_record(ledger_id: int, master_key: bytes, flags: int = FLAG_STORED_KEY) -> bytes:
    body = FENCE_HEAD.pack(ledger_id) + master_key
    return REC_HEADER.pack(len(body), FENCE, flags, len(master_key)) + body


def lac_record(ledger_id: int, lac: int, master_key: bytes, flags: int = FLAG_STORED_KEY) -> bytes:
    body = LAC_HEAD.pack(ledger_id, lac) + master_key
    return REC_HEADER.pack(len(body), LAC, flags, len(master_key)) + body


class Record(NamedTuple):
    type: int
    flags: int
    ledger_id: int
    master_key: bytes
    lac: int  # LAC records only
    lengths: np.ndarray | None  # ADD_BATCH only: int64 entry lengths
    data_offset: int  # ADD_BATCH: offset of the entry data from the record start
    size: int  # whole record, header included


def parse(buf, pos: int) -> Record:
    """Parse the record at ``pos`` of ``buf`` (bytes / memoryview).

    Raises:
        RecordError: the record is cut short or its fields cannot be valid.
    """
    end = len(buf)
    if pos + REC_HEADER_SIZE > end:
        raise RecordError("record header cut short")
    body_len, rtype, flags, key_len = REC_HEADER.unpack_from(buf, pos)
    size = REC_HEADER_SIZE + body_len
    if pos + size > end:
        raise RecordError(f"record of {size} bytes cut short")
    p = pos + REC_HEADER_SIZE
    if rtype == ADD_BATCH:
        ledger_id, count, _ = ADD_HEAD.unpack_from(buf, p)
        p += ADD_HEAD.size
        key = bytes(buf[p:p + key_len])
        p += key_len
        lengths = np.frombuffer(buf, dtype=LENGTHS_DTYPE, count=count, offset=p).astype(np.int64)
        p += 4 * count
        if int(lengths.sum()) != pos + size - p:
            raise RecordError("entry lengths do not add up to the record size")
        return Record(rtype, flags, ledger_id, key, -1, lengths, p - pos, size)
    if rtype == FENCE:
        (ledger_id,) = FENCE_HEAD.unpack_from(buf, p)
        key = bytes(buf[p + FENCE_HEAD.size:p + FENCE_HEAD.size + key_len])
        return Record(rtype, flags, ledger_id, key, -1, None, 0, size)
    if rtype == LAC:
        ledger_id, lac = LAC_HEAD.unpack_from(buf, p)
        key = bytes(buf[p + LAC_HEAD.size:p + LAC_HEAD.size + key_len])
        return Record(rtype, flags, ledger_id, key, lac, None, 0, size)
    raise RecordError(f"unknown record type {rtype}")


def batch_entries(rec: Record, buf, pos: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets inside the data, ledger ids, entry ids) of the entries of the ADD_BATCH record
    ``rec`` at ``pos`` of ``buf``."""
    offsets = np.cumsum(rec.lengths) - rec.lengths
    ledger_ids, entry_ids = batch_ids(buf[pos + rec.data_offset:pos + rec.size], offsets)
    return offsets, ledger_ids, entry_ids


def iter_records(buf, start: int = 0):
    """Yield (offset, Record) for every record in ``buf`` from ``start``."""
    pos = start
    while pos < len(buf):
        rec = parse(buf, pos)
        yield pos, rec
        pos += rec.size
