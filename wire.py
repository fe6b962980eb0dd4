"""The bookie wire protocol over ZeroMQ: frames, op codes, flags, status codes.

A pure codec (no socket, no ZeroMQ import): the frames on a socket are ``bookie.wire_sockets``.

Theory of operation
-------------------
A bookie listens on two ZeroMQ ROUTER sockets: the *add* socket at ``bookiePort`` and the *read*
socket at ``bookiePort + 1``.  A client talks to each with a DEALER socket.  Every message is a
multipart message whose first frame is a fixed 24-byte header; the frames after it depend on the
op.  A response carries the same header layout, with the request's ``request_id`` echoed and the
``flags`` field replaced by a status code.  docs/protocol.md is the user-facing copy of this spec.

Header (24 bytes, little-endian)::

    offset size field
    0      2    magic       b"BK"
    2      1    version     PROTOCOL_VERSION (1)
    3      1    op          Op
    4      2    flags       request: Flag bits;  response: Status code
    6      2    reserved    0
    8      8    request_id  u64 chosen by the client, echoed in the response
    16     8    ledger_id   i64 (>= 0)

Ops and their frames (request -> response)::

    ADD (1)        [hdr, master_key, lengths, data] -> [hdr]
                   lengths: u32 little-endian array, one per entry (1..MAX_BATCH entries);
                   data: the entries back to back, each exactly as the client formatted it
                   (see ENTRY FORMAT).  Every entry must belong to hdr.ledger_id.  A batch is
                   all-or-nothing: one status answers the whole batch.  Flag RECOVERY_ADD lets
                   the batch into a fenced ledger.
                   With flag RECOVERY_CREDENTIAL (only beside RECOVERY_ADD) the master_key
                   frame holds the ledger's cluster recovery credential instead
                   (bookie.metadata.recovery_secret; autorecovery's copies).
                   Flag DEFERRED_SYNC (not beside RECOVERY_ADD: a copy is always made durable):
                   the bookie answers once the batch is stored (readable), without waiting
                   for the journal's fdatasync; a later FORCE_LEDGER makes it durable.
    READ (2)       [hdr, u64 first_entry_id | u32 max_count] -> [hdr, lengths, data]
                   (+ master_key frame when flag FENCE is set).  Returns the consecutive
                   entries the bookie holds from first_entry_id on, at most max_count of them
                   and at most MAX_READ_BYTES in all; NO_ENTRY when it has not even the first.
                   With flag STRIDE the body is [u64 first_entry_id | u32 max_count |
                   u32 stride] (stride 1..MAX_STRIDE) and the answer holds entries first,
                   first + stride, first + 2*stride, ... up to the first one the bookie does
                   not hold: one request reads a striped ledger's share on one replica.
    READ_LAC (3)   [hdr] -> [hdr, i64 lac | i64 last_entry_id]
                   (+ master_key frame with flag FENCE; + [u64 previous_lac | u32 timeout_ms]
                   body with flag LONG_POLL, answered once lac > previous_lac or at timeout).
                   With FENCE, flag RECOVERY_CREDENTIAL (READ too) says the master_key frame
                   holds the ledger's cluster recovery credential.
                   lac is the highest last-add-confirmed this bookie has seen for the ledger
                   (piggybacked on entries or written explicitly); -1 when none.
                   last_entry_id is the highest entry id it stores; -1 when none.
                   With flag WITH_ENTRIES (only beside LONG_POLL) the body is [i64 previous_lac
                   | u32 timeout_ms | u32 max_entries | u32 max_bytes] and the answer is
                   [hdr, i64 lac | i64 last_entry_id, lengths, data]: after the LAC body, the
                   consecutive entries the bookie holds from previous_lac + 1 up to the lac of
                   the same answer (never past it), at most max_entries and max_bytes of them
                   (each trimmed to MAX_BATCH / MAX_READ_BYTES, never refused; the first entry
                   rides even when alone over max_bytes), framed as a READ answer; both frames
                   empty when none ride.  A bookie that predates the flag refuses the request
                   with BAD_REQUEST (unknown flag bits): a client then polls it without.
    WRITE_LAC (4)  [hdr, master_key, i64 lac] -> [hdr]
    INFO (5)       [hdr] -> [hdr, orjson {"bookie_id", "free_bytes", "total_bytes",
                                           "writable", "version"}]
    FORCE_LEDGER (6) [hdr] -> [hdr]   (add socket; no flags, no body)
                   Answered OK once every record of the ledger this bookie placed before the
                   request is durable (its journal fdatasync'd it): the DEFERRED_SYNC adds
                   acknowledged before it included.  A ledger the bookie holds nothing of is
                   answered OK too (nothing to make durable).

ENTRY FORMAT (built by the client, stored by the bookie exactly as received, big-endian as in
BookKeeper)::

    0   8  ledger_id     i64
    8   8  entry_id      i64
    16  8  lac           i64 (last-add-confirmed when the entry was written, -1 for none)
    24  8  length        i64 (ledger length in bytes including this entry's payload)
    32  d  digest        d = DIGEST_SIZES[digest type], over bytes 0..32 and the payload
    32+d   payload

The bookie reads only ledger_id, entry_id and lac of an entry; the digest is the client's.
"""

from __future__ import annotations

import collections.abc
import enum
import struct

import numpy as np

MAGIC = b"BK"
PROTOCOL_VERSION = 1

HEADER = struct.Struct("<2sBBHHQq")
HEADER_SIZE = HEADER.size  # 24
assert HEADER_SIZE == 24

ENTRY_HEADER = struct.Struct(">qqqq")
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # 32

READ_BODY = struct.Struct("<QI")  # first_entry_id, max_count
READ_STRIDE_BODY = struct.Struct("<QII")  # first_entry_id, max_count, stride (READ with STRIDE)
LAC_BODY = struct.Struct("<qq")  # lac, last_entry_id
LONG_POLL_BODY = struct.Struct("<qI")  # previous_lac, timeout_ms
# READ_LAC with LONG_POLL and WITH_ENTRIES: previous_lac, timeout_ms, max_entries, max_bytes
LONG_POLL_ENTRIES_BODY = struct.Struct("<qIII")
WRITE_LAC_BODY = struct.Struct("<q")
LEDGER_ID = struct.Struct("<q")  # internal frames between a bookie's workers
STATUS = struct.Struct("<H")

MAX_BATCH = 65536  # entries in one ADD message
MAX_MASTER_KEY = 64  # bytes
MAX_READ_BYTES = 4 * 1024 * 1024  # one READ response carries at most this much entry data
MAX_LONG_POLL_MS = 60_000
MAX_ID = (1 << 63) - 1
MAX_STRIDE = 1024  # READ with STRIDE: every stride-th entry (an ensemble size) at most

# Sizes of the digest field per digest type (BookKeeper: CRC32 and CRC32C are carried as 8
# bytes, the keyed MAC is an HMAC-SHA1 of 20 bytes, "dummy" carries none).
DIGEST_SIZES = {"crc32": 8, "crc32c": 8, "mac": 20, "dummy": 0}


class Op(enum.IntEnum):
    ADD = 1
    READ = 2
    READ_LAC = 3
    WRITE_LAC = 4
    INFO = 5
    FORCE_LEDGER = 6


class Flag(enum.IntFlag):
    NONE = 0
    RECOVERY_ADD = 1  # ADD: allowed into a fenced ledger
    FENCE = 2  # READ / READ_LAC: fence the ledger (persisted) before answering
    LONG_POLL = 4  # READ_LAC: wait for the LAC to pass previous_lac
    STRIDE = 8  # READ: every stride-th entry from first_entry_id (a striped ledger's replica)
    # ADD with RECOVERY_ADD, READ / READ_LAC with FENCE: the master key frame holds the cluster
    # recovery credential of the ledger (bookie.metadata.recovery_secret), not its master key
    RECOVERY_CREDENTIAL = 16
    DEFERRED_SYNC = 32  # ADD: answer once stored, not waiting for the journal's fdatasync
    WITH_ENTRIES = 64  # READ_LAC with LONG_POLL: the answer carries the entries up to its LAC


class Bits:
    """``Flag``'s bits as plain ints, for the per-request paths: ``flags & Flag.X`` on an int
    builds a Flag object each time (IntFlag's ``__rand__``), which was a fifth of what a refused
    request cost the read worker under a flood."""

    NONE, RECOVERY_ADD, FENCE, LONG_POLL, STRIDE, RECOVERY_CREDENTIAL, DEFERRED_SYNC = 0, 1, 2, 4, 8, 16, 32
    WITH_ENTRIES = 64


assert {k: v for k, v in vars(Bits).items() if k.isupper()} == {n: int(f) for n, f in Flag.__members__.items()}


class Status(enum.IntEnum):
    """Response status codes; BookKeeper's numeric values and meanings."""

    OK = 0
    BAD_REQUEST = 100  # malformed frames, wrong counts, unknown op, ids out of range, oversized
    IO_ERROR = 101  # the bookie failed to read or write its disks
    UNAUTHORIZED = 102  # master key does not match the one the ledger was created with
    BAD_VERSION = 103  # protocol version not spoken by this bookie
    FENCED = 104  # ledger fenced: normal adds refused (recovery adds pass)
    READ_ONLY = 105  # bookie is read-only: adds refused
    TOO_MANY_REQUESTS = 106  # back-pressure (or the metadata store cannot be asked now): try again later
    ENTRY_EXISTS = 107  # an add of an entry this bookie holds with other bytes: entries are write-once
    OVER_QUOTA = 108  # a normal add that would take its writer past ledgerStorageQuotaBytes: nothing stored (not BookKeeper's)
    NO_LEDGER = 402  # this bookie holds nothing for the ledger
    NO_ENTRY = 403  # this bookie does not hold the entry


KNOWN_OPS = frozenset(int(o) for o in Op)
_FLAG_MASK = int(Flag.RECOVERY_ADD | Flag.FENCE | Flag.LONG_POLL | Flag.STRIDE | Flag.RECOVERY_CREDENTIAL
                 | Flag.DEFERRED_SYNC | Flag.WITH_ENTRIES)


class ProtocolError(ValueError):
    """A frame that does not follow this spec; carries the status to answer with."""

    def __init__(self, message: str, status: Status = Status.BAD_REQUEST):
        super().__init__(message)
        self.status = status


def pack_header(op: int, flags_or_status: int, request_id: int, ledger_id: int) -> bytes:
    return HEADER.pack(MAGIC, PROTOCOL_VERSION, op, flags_or_status, 0, request_id, ledger_id)


def unpack_header(frame) -> tuple[int, int, int, int]:
    """Decode a header frame.

    Returns:
        (op, flags_or_status, request_id, ledger_id)
    Raises:
        ProtocolError: wrong size, magic, version (BAD_VERSION), op, flags or ledger id.
    """
    if len(frame) != HEADER_SIZE:
        raise ProtocolError(f"header frame is {len(frame)} bytes, expected {HEADER_SIZE}")
    magic, version, op, flags, _reserved, request_id, ledger_id = HEADER.unpack(frame)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} not supported", Status.BAD_VERSION)
    if op not in KNOWN_OPS:
        raise ProtocolError(f"unknown op code {op}")
    if ledger_id < 0:
        raise ProtocolError(f"ledger id {ledger_id} out of range")
    return op, flags, request_id, ledger_id


_ALLOWED_FLAGS = {
    int(Op.ADD): int(Flag.RECOVERY_ADD | Flag.RECOVERY_CREDENTIAL | Flag.DEFERRED_SYNC),
    int(Op.READ): int(Flag.FENCE | Flag.STRIDE | Flag.RECOVERY_CREDENTIAL),
    int(Op.READ_LAC): int(Flag.FENCE | Flag.LONG_POLL | Flag.RECOVERY_CREDENTIAL | Flag.WITH_ENTRIES),
}


_ADD_OR_FENCE = int(Flag.RECOVERY_ADD | Flag.FENCE)


def check_request_flags(op: int, flags: int) -> None:
    if flags & ~_FLAG_MASK:
        raise ProtocolError(f"unknown flag bits {flags:#x}")
    if flags & ~_ALLOWED_FLAGS.get(op, 0):
        raise ProtocolError(f"flags {flags:#x} not valid for op {Op(op).name}")
    if flags & Bits.RECOVERY_CREDENTIAL and not flags & _ADD_OR_FENCE:
        raise ProtocolError("RECOVERY_CREDENTIAL only on a recovery add or a fence")
    if flags & Bits.DEFERRED_SYNC and flags & Bits.RECOVERY_ADD:
        raise ProtocolError("DEFERRED_SYNC not on a recovery add")
    if flags & Bits.WITH_ENTRIES and not flags & Bits.LONG_POLL:
        raise ProtocolError("WITH_ENTRIES only on a long poll")


def read_request(first_entry_id: int, max_count: int, stride: int = 1) -> tuple[int, bytes]:
    """(flags, body frame) of a READ of ``max_count`` entries from ``first_entry_id``, every
    ``stride``-th one (stride 1: consecutive entries, the plain READ body)."""
    max_count = min(max_count, MAX_BATCH)
    if stride == 1:
        return 0, READ_BODY.pack(first_entry_id, max_count)
    return int(Flag.STRIDE), READ_STRIDE_BODY.pack(first_entry_id, max_count, stride)


def unpack_read_body(flags: int, body) -> tuple[int, int, int]:
    """(first_entry_id, max_count, stride) of a READ body frame.

    Raises:
        ProtocolError: wrong size for the flags, entry id out of range, zero count, stride
        outside 1..MAX_STRIDE.
    """
    if flags & Flag.STRIDE:
        if len(body) != READ_STRIDE_BODY.size:
            raise ProtocolError("READ with STRIDE body is first_entry_id u64 | max_count u32 | stride u32")
        first, max_count, stride = READ_STRIDE_BODY.unpack(body)
        if not 1 <= stride <= MAX_STRIDE:
            raise ProtocolError(f"stride {stride} outside 1..{MAX_STRIDE}")
    else:
        if len(body) != READ_BODY.size:
            raise ProtocolError("READ body is first_entry_id u64 | max_count u32")
        (first, max_count), stride = READ_BODY.unpack(body), 1
    if first > MAX_ID or max_count == 0:
        raise ProtocolError("entry id out of range or zero count")
    return first, max_count, stride


def long_poll_request(previous_lac: int, timeout_ms: int, max_entries: int = 0,
                      max_bytes: int = 0) -> tuple[int, bytes]:
    """(flags, body frame) of a READ_LAC long poll; with ``max_entries`` > 0 it asks for the
    entries after ``previous_lac`` too (WITH_ENTRIES), at most that many and ``max_bytes``
    (both sent as u32, capped there: the bookie trims them to its own limits anyway)."""
    if max_entries <= 0:
        return int(Flag.LONG_POLL), LONG_POLL_BODY.pack(previous_lac, timeout_ms)
    return int(Flag.LONG_POLL | Flag.WITH_ENTRIES), LONG_POLL_ENTRIES_BODY.pack(
        previous_lac, timeout_ms, min(max_entries, 0xFFFFFFFF), min(max(max_bytes, 0), 0xFFFFFFFF))


def unpack_long_poll_body(flags: int, body) -> tuple[int, int, int, int]:
    """(previous_lac, timeout_ms, max_entries, max_bytes) of a long poll's body frame:
    max_entries and max_bytes trimmed to MAX_BATCH and MAX_READ_BYTES (0, 0 without
    WITH_ENTRIES).  A poll asking for more than the limits gets them trimmed, never refused.

    Raises:
        ProtocolError: wrong size for the flags.
    """
    if flags & Bits.WITH_ENTRIES:
        if len(body) != LONG_POLL_ENTRIES_BODY.size:
            raise ProtocolError("LONG_POLL with WITH_ENTRIES body is previous_lac i64 | timeout_ms u32 | "
                                "max_entries u32 | max_bytes u32")
        previous, timeout_ms, max_entries, max_bytes = LONG_POLL_ENTRIES_BODY.unpack(body)
        return previous, timeout_ms, min(max_entries, MAX_BATCH), min(max_bytes, MAX_READ_BYTES)
    if len(body) != LONG_POLL_BODY.size:
        raise ProtocolError("LONG_POLL body is previous_lac i64 | timeout_ms u32")
    previous, timeout_ms = LONG_POLL_BODY.unpack(body)
    return previous, timeout_ms, 0, 0


def check_entry_frames(lengths_frame, data_len: int) -> None:
    """Check an answer's (lengths, data) pair: a u32 array whose sum is the data's length.

    Raises:
        ProtocolError: they do not add up.
    """
    if len(lengths_frame) % 4 or int(np.frombuffer(lengths_frame, LENGTHS_DTYPE).sum(
            dtype=np.int64)) != data_len:
        raise ProtocolError("entry lengths do not add up to the data frame")


def pack_entry(ledger_id: int, entry_id: int, lac: int, length: int, digest: bytes,
               payload) -> bytes:
    """Format one entry as it travels and is stored (see ENTRY FORMAT)."""
    return b"".join((ENTRY_HEADER.pack(ledger_id, entry_id, lac, length), digest, payload))


def unpack_entry_header(entry) -> tuple[int, int, int, int]:
    """Returns (ledger_id, entry_id, lac, length) of a formatted entry."""
    if len(entry) < ENTRY_HEADER_SIZE:
        raise ProtocolError(f"entry of {len(entry)} bytes is shorter than its header")
    return ENTRY_HEADER.unpack_from(entry, 0)


# ---- batches of entries: a lengths frame (u32 array) plus one data frame ----------------------

LENGTHS_DTYPE = np.dtype("<u4")
_BE_I64 = np.dtype(">i8")


def pack_batch(entries) -> tuple[bytes, bytes]:
    """Pack formatted entries into (lengths frame, data frame)."""
    if isinstance(entries, EntryBatch) and entries.packed:
        return entries.lengths_frame(), bytes(entries.data_frame())
    lengths = np.fromiter((len(e) for e in entries), dtype=LENGTHS_DTYPE, count=len(entries))
    return lengths.tobytes(), b"".join(entries)


class EntryBatch(collections.abc.MutableSequence):
    """Formatted entries packed back to back in one buffer, as an ADD message's lengths and
    data frames carry them: what ``DigestManager.encode_many`` builds, so the client sends a
    run of entries without touching each one again (``lengths_frame`` / ``data_frame``).

    It reads as a sequence of the entries (an item is a ``bytes`` copy of one entry; a slice
    of step 1 is an EntryBatch over the same buffer).  Changing it (``batch[i] = ...``,
    ``append``...) turns it into a plain list of its entries first: ``packed`` is then False
    and the frames are built from the entries as ``pack_batch`` would.
    """

    __slots__ = ("buffer", "starts", "ends", "_items")

    def __init__(self, buffer: bytes, starts: np.ndarray, ends: np.ndarray):
        self.buffer = buffer  # the entries, and maybe more around them
        self.starts = starts  # int64 offsets of each entry in ``buffer``
        self.ends = ends
        self._items: list | None = None  # set once changed

    @classmethod
    def concat(cls, batches) -> "EntryBatch":
        """One batch of the entries of ``batches`` in order, in one new buffer (one copy)."""
        frames = [b.data_frame() for b in batches]
        sizes = np.concatenate([b.ends - b.starts for b in batches])
        ends = np.cumsum(sizes)
        return cls(b"".join(frames), ends - sizes, ends)

    @property
    def packed(self) -> bool:
        """True while the entries lie back to back in ``buffer`` (not changed since)."""
        return self._items is None

    def lengths_frame(self) -> bytes:
        return (self.ends - self.starts).astype(LENGTHS_DTYPE).tobytes()

    def data_frame(self):
        """The entries back to back: the buffer itself, or a memoryview of its part."""
        if not len(self.ends):
            return b""
        lo, hi = int(self.starts[0]), int(self.ends[-1])
        return self.buffer if lo == 0 and hi == len(self.buffer) else memoryview(self.buffer)[lo:hi]

    def __len__(self) -> int:
        return len(self.ends) if self._items is None else len(self._items)

    def __getitem__(self, i):
        if self._items is not None:
            return self._items[i]
        if isinstance(i, slice):
            if i.step not in (None, 1):
                return list(self)[i]
            return EntryBatch(self.buffer, self.starts[i], self.ends[i])
        return self.buffer[int(self.starts[i]):int(self.ends[i])]

    def __iter__(self):
        if self._items is not None:
            return iter(self._items)
        return map(self.buffer.__getitem__, map(slice, self.starts.tolist(), self.ends.tolist()))

    def _unpack(self) -> list:
        if self._items is None:
            self._items = list(self)
            self.buffer, self.starts, self.ends = b"", np.zeros(0, np.int64), np.zeros(0, np.int64)
        return self._items

    def __setitem__(self, i, value) -> None:
        self._unpack()[i] = value

    def __delitem__(self, i) -> None:
        del self._unpack()[i]

    def insert(self, i: int, value) -> None:
        self._unpack().insert(i, value)

    def __eq__(self, other) -> bool:
        if not isinstance(other, collections.abc.Sequence) or isinstance(other, (bytes, str)):
            return NotImplemented
        return len(self) == len(other) and all(map(bytes.__eq__, map(bytes, self), map(bytes, other)))

    __hash__ = None

    def __repr__(self) -> str:
        return f"EntryBatch({len(self)} entries)"


def batch_offsets(lengths_frame, data_len: int, max_entry_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a lengths frame against its data frame.

    Returns:
        (lengths as int64, start offset of each entry in the data frame as int64)
    Raises:
        ProtocolError: empty or oversized batch, entries shorter than a header or over the
        maximum entry size, lengths that do not add up to the data frame.
    """
    n_bytes = len(lengths_frame)
    if n_bytes == 0 or n_bytes % 4:
        raise ProtocolError(f"lengths frame of {n_bytes} bytes is not a non-empty u32 array")
    if n_bytes < 4 * SMALL_BATCH:
        return _small_batch_offsets(lengths_frame, data_len, max_entry_bytes)
    lengths = np.frombuffer(lengths_frame, dtype=LENGTHS_DTYPE).astype(np.int64)
    if len(lengths) > MAX_BATCH:
        raise ProtocolError(f"batch of {len(lengths)} entries exceeds {MAX_BATCH}")
    if lengths.min() < ENTRY_HEADER_SIZE:
        raise ProtocolError("an entry is shorter than the 32-byte entry header")
    if lengths.max() > max_entry_bytes:
        raise ProtocolError(f"an entry of {int(lengths.max())} bytes exceeds the maximum "
                            f"entry size of {max_entry_bytes} bytes")
    ends = np.cumsum(lengths)
    if int(ends[-1]) != data_len:
        raise ProtocolError(f"entry lengths add up to {int(ends[-1])} bytes, data frame has {data_len}")
    return lengths, ends - lengths


def _small_batch_offsets(lengths_frame, data_len: int, max_entry_bytes: int):
    """``batch_offsets`` of a batch of a few entries, checked in plain Python: numpy's fixed
    cost per call (seven of them above) is most of a lone add's checks, the more so in a
    process just woken with cold caches (bench/README.md, issue 40)."""
    lengths = struct.unpack(f"<{len(lengths_frame) // 4}I", lengths_frame)
    if min(lengths) < ENTRY_HEADER_SIZE:
        raise ProtocolError("an entry is shorter than the 32-byte entry header")
    if max(lengths) > max_entry_bytes:
        raise ProtocolError(f"an entry of {max(lengths)} bytes exceeds the maximum "
                            f"entry size of {max_entry_bytes} bytes")
    total = sum(lengths)
    if total != data_len:
        raise ProtocolError(f"entry lengths add up to {total} bytes, data frame has {data_len}")
    starts, at = [], 0
    for n in lengths:
        starts.append(at)
        at += n
    return np.array(lengths, dtype=np.int64), np.array(starts, dtype=np.int64)


def batch_header_fields(data, offsets: np.ndarray, field: int) -> np.ndarray:
    """Read one i64 field (0 ledger_id, 1 entry_id, 2 lac, 3 length) of every entry at once."""
    raw = np.frombuffer(data, dtype=np.uint8)
    idx = (offsets + 8 * field)[:, None] + np.arange(8)
    return raw[idx].view(_BE_I64).reshape(-1).astype(np.int64)


_IDS = struct.Struct(">qq")
SMALL_BATCH = 16  # below this a struct loop beats numpy's fancy indexing


def batch_ids(data, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ledger ids, entry ids) of every entry of a batch, in one pass."""
    if len(offsets) < SMALL_BATCH:
        pairs = [_IDS.unpack_from(data, off) for off in offsets.tolist()]
        both = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        return both[:, 0], both[:, 1]
    raw = np.frombuffer(data, dtype=np.uint8)
    both = raw[offsets[:, None] + np.arange(16)].view(_BE_I64).reshape(-1, 2).astype(np.int64)
    return both[:, 0], both[:, 1]


def split_batch(lengths_frame, data) -> list[memoryview]:
    """Split a (lengths, data) pair into memoryviews of the entries (no copies)."""
    lengths = np.frombuffer(lengths_frame, dtype=LENGTHS_DTYPE)
    view = memoryview(data)
    out = []
    pos = 0
    for n in lengths.tolist():
        out.append(view[pos:pos + n])
        pos += n
    return out
