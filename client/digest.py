"""Entry formatting and digests, master keys and password checks.

Spec
----
An entry travels and is stored as (big-endian, see ``bookie.wire`` ENTRY FORMAT)::

    ledger_id i64 | entry_id i64 | lac i64 | length i64 | digest (d bytes) | payload

The digest covers the 32 header bytes and the payload:

=========  ====  ==========================================================================
type       d     value
=========  ====  ==========================================================================
crc32      8     zlib CRC-32, as an unsigned 64-bit big-endian integer (BookKeeper's CRC32)
crc32c     8     CRC-32C (Castagnoli), likewise
mac        20    HMAC-SHA1 keyed by SHA-1(b"mac" + password) (BookKeeper's MacDigestManager)
dummy      0     nothing: no integrity check at all
=========  ====  ==========================================================================

The *master key* a writer sends with every add (and a fencing reader with its fence) is
SHA-1(b"ledger" + password), 20 bytes, as in BookKeeper; a bookie binds a ledger to the first
master key it sees and refuses others.  The MAC key differs from the master key on purpose:
bookies learn the master key, and must not be able to forge digests with it.

The metadata store keeps a slow, salted verifier of the master key as the ledger's
``password_digest`` (metadata/ledger.py ``make_verifier``), so that opening with a wrong
password fails before anything is fenced, without the store learning the master key or
handing out a fast guessing oracle.  ``password_digest`` here is the older records' form.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import struct
import zlib

import crc32c as _crc32c
import numpy as np

from bookie.client.errors import DigestMismatchError, InvalidArgumentError
from bookie.client.protocol.actions import RawEntries
from bookie.client.protocol.reader import decode_each
from bookie.wire import DIGEST_SIZES, ENTRY_HEADER, ENTRY_HEADER_SIZE, LENGTHS_DTYPE, EntryBatch

DIGEST_TYPES = tuple(DIGEST_SIZES)  # ("crc32", "crc32c", "mac", "dummy")
_U64 = struct.Struct(">Q")
_HEADER_AND_CRC = struct.Struct(">qqqqQ")  # the entry header, then a CRC digest
_CRC_END = ENTRY_HEADER_SIZE + 8
_FIELD_BYTES = np.arange(_CRC_END)  # the 5 big-endian 8-byte fields at an entry's start
_BE_I64, _BE_U64 = np.dtype(">i8"), np.dtype(">u8")
# encode_many builds one buffer in numpy from this many entries on.  Measured on the shared
# 2-core machine (bench/README.md, issue 41, h41c): alone, the one pass costs a fixed ~25 us
# and wins from about 256 entries of 1 KiB (20-25 % at 1,000); inside the client's add loop,
# with the batches held until answered and merged into one ADD, 256-entry parts cost more
# than entry by entry (fresh pages for each large buffer).  So only the client's big parts
# (add_range's up to ADD_CHUNK) take it.
ENCODE_RUN_MIN_ENTRIES = 1024
# The bytes of the 32-byte entry header that differ between the entries of one encode_many
# call: entry_id (8..15) and length (24..31); ledger_id and lac are the same for all.
_VARYING = np.array([*range(8, 16), *range(24, 32)])


def _header_crc_table(crc, positions=_VARYING) -> np.ndarray:
    """``table[k, v]``: what byte value ``v`` at the header's k-th varying position (of
    ``positions``) adds to the CRC of a 32-byte entry header.  A CRC is affine over GF(2): for
    inputs of one length, crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0); so the CRC of a header is the
    CRC of its constant part (ledger id and lac, zeros elsewhere; with every position varying,
    the zero header) xor-ed with one table value per varying byte, which numpy takes for a
    whole batch at once."""
    zero = bytes(ENTRY_HEADER_SIZE)
    c0 = crc(zero)
    per_bit = np.empty((len(positions), 8), np.uint32)
    for k, pos in enumerate(positions.tolist()):
        for bit in range(8):
            header = bytearray(zero)
            header[pos] = 1 << bit
            per_bit[k, bit] = crc(bytes(header)) ^ c0
    values = np.arange(256)
    table = np.zeros((len(positions), 256), np.uint32)
    for bit in range(8):
        table ^= np.where((values >> bit) & 1, per_bit[:, bit:bit + 1], 0).astype(np.uint32)
    return table


_HEADER_CRC_TABLES = {"crc32": _header_crc_table(zlib.crc32),
                      "crc32c": _header_crc_table(_crc32c.crc32c)}
_VARYING_ROWS = np.arange(len(_VARYING))
# Decoding, every header byte may differ (the lac too): a table of all 32 positions, and the
# CRC of the zero header it is xor-ed onto.
_HEADER_ROWS = np.arange(ENTRY_HEADER_SIZE)
_WHOLE_HEADER_CRC = {kind: (_header_crc_table(crc, _HEADER_ROWS), crc(bytes(ENTRY_HEADER_SIZE)))
                     for kind, crc in (("crc32", zlib.crc32), ("crc32c", _crc32c.crc32c))}


def master_key(password: bytes) -> bytes:
    """The 20-byte key that travels with adds and fences: SHA-1(b"ledger" + password)."""
    return hashlib.sha1(b"ledger" + bytes(password)).digest()


def password_digest(password: bytes) -> bytes:
    """What older records keep to check a password (new ones: metadata/ledger.py verifiers)."""
    return hashlib.sha256(b"bookie-ledger-password:" + bytes(password)).digest()


def check_digest_type(digest: str) -> str:
    name = str(digest).lower()
    if name not in DIGEST_SIZES:
        raise InvalidArgumentError(f"unknown digest type {digest!r}; use one of "
                                   f"{', '.join(DIGEST_TYPES)}")
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerEntry:
    """An entry read back: ``data`` is the payload the writer added."""

    ledger_id: int
    entry_id: int
    data: bytes
    lac: int = -1
    length: int = 0


def _entry_maker():
    """LedgerEntry(ledger_id, entry_id, data, lac, length) without the frozen dataclass's
    generic __init__ (object.__setattr__ by name, 5 times): the slot descriptors are set
    directly.  Same object, same checks elsewhere; about twice as fast, which matters at one
    entry per call in bulk reads."""
    new = object.__new__
    set_lid, set_eid, set_data, set_lac, set_length = (
        LedgerEntry.ledger_id.__set__, LedgerEntry.entry_id.__set__, LedgerEntry.data.__set__,
        LedgerEntry.lac.__set__, LedgerEntry.length.__set__)

    def make(ledger_id, entry_id, data, lac, length):
        entry = new(LedgerEntry)
        set_lid(entry, ledger_id)
        set_eid(entry, entry_id)
        set_data(entry, data)
        set_lac(entry, lac)
        set_length(entry, length)
        return entry
    return make


_new_entry = _entry_maker()

# Compiled (Cython), the entries a read decodes are taken out of the cyclic garbage collector's
# care (``PyObject_GC_UnTrack``, declared in digest.pxd): a LedgerEntry holds ints and a bytes
# and is frozen, so it can be in no reference cycle, as CPython itself reasons for a tuple of
# atoms.  Tracked, every entry read was scanned by the collections its allocations set off, the
# full ones scanning every entry a reader still held: 24 % of the client's read path under
# py-spy (issue 42).  Plain Python has no such call; there they stay tracked.  (Building the
# entries in C, slot by slot, saved another 0.6 us per entry; it was hand-written C, not this
# source compiled, and is not done.)
try:
    import cython  # compiled: Cython's compile-time module; plain: its shadow, if installed
    _COMPILED = cython.compiled
except ImportError:
    _COMPILED = False


def _new_entries(ledger_ids: list, entry_ids: list, payloads: list, lacs: list,
                 lengths: list) -> list:
    """LedgerEntry objects of the columns (lists of one length), one per row, outside the
    garbage collector's care where compiled (see above)."""
    entries = list(map(_new_entry, ledger_ids, entry_ids, payloads, lacs, lengths))
    if _COMPILED:
        for entry in entries:
            _gc_untrack(entry)
    return entries


def _new_single(ledger_id, entry_id, data, lac, length) -> LedgerEntry:
    """One LedgerEntry, outside the garbage collector's care where compiled (see above)."""
    entry = _new_entry(ledger_id, entry_id, data, lac, length)
    if _COMPILED:
        _gc_untrack(entry)
    return entry


RUN_MIN_ENTRIES = 24  # a READ answer this long or longer is decoded in one pass (decode_many)


class EntryRun(list):
    """The entries of one READ answer as ``DigestManager.decode_many`` checked them in one
    pass: a list (per entry the LedgerEntry, or the DigestMismatchError of a bad copy), with
    ``entry_ids`` (the ids the entries' headers claim, in order) and ``intact`` (no bad copy),
    so a reader can take a whole answer at once (``ReadOp``) without looking at each entry."""

    __slots__ = ("entry_ids", "intact")


class DigestManager:
    """Formats entries of one ledger and checks them when read back."""

    __slots__ = ("ledger_id", "digest_type", "size", "_fn", "_mac_key", "decode")

    def __init__(self, ledger_id: int, digest_type: str, password: bytes):
        self.ledger_id = ledger_id
        self.digest_type = check_digest_type(digest_type)
        self.size = DIGEST_SIZES[self.digest_type]
        self._mac_key = hashlib.sha1(b"mac" + bytes(password)).digest()
        self._fn = {"crc32": self._crc32, "crc32c": self._crc32c, "mac": self._mac,
                    "dummy": self._dummy}[self.digest_type]
        # decode(raw) -> LedgerEntry: check and unpack a formatted entry (see _decode)
        self.decode = self._decode_crc if self.digest_type in ("crc32", "crc32c") else \
            self._decode

    @staticmethod
    def _crc32(header: bytes, payload) -> bytes:
        return _U64.pack(zlib.crc32(payload, zlib.crc32(header)))

    @staticmethod
    def _crc32c(header: bytes, payload) -> bytes:
        return _U64.pack(_crc32c.crc32c(payload, _crc32c.crc32c(header)))

    def _mac(self, header: bytes, payload) -> bytes:
        mac = hmac.new(self._mac_key, header, hashlib.sha1)
        mac.update(payload)
        return mac.digest()

    @staticmethod
    def _dummy(header: bytes, payload) -> bytes:
        return b""

    def encode(self, entry_id: int, lac: int, length: int, payload) -> bytes:
        """The formatted entry (header, digest, payload)."""
        header = ENTRY_HEADER.pack(self.ledger_id, entry_id, lac, length)
        return b"".join((header, self._fn(header, payload), payload))

    def encode_many(self, first_entry_id: int, lac: int, length: int, payloads):
        """Format consecutive entries from ``first_entry_id``, all with ``lac``; ``length`` is
        the ledger length before the first.

        Returns:
            (formatted entries, running ledger length after each), the same bytes as
            ``encode`` entry by entry.  From ENCODE_RUN_MIN_ENTRIES entries on with a CRC or
            no digest the entries are a ``wire.EntryBatch``: built in one buffer, ready to be
            an ADD message's frames (``_encode_run``); otherwise a list.
        """
        if len(payloads) >= ENCODE_RUN_MIN_ENTRIES and self.digest_type != "mac":
            return self._encode_run(first_entry_id, lac, length, payloads)
        pack, lid = ENTRY_HEADER.pack, self.ledger_id
        join, u64 = b"".join, _U64.pack
        datas, lengths = [], []
        add_data, add_length = datas.append, lengths.append
        entry_id = first_entry_id
        kind = self.digest_type
        if kind == "crc32" or kind == "crc32c":
            crc = zlib.crc32 if kind == "crc32" else _crc32c.crc32c
            for payload in payloads:
                length += len(payload)
                header = pack(lid, entry_id, lac, length)
                add_data(join((header, u64(crc(payload, crc(header))), payload)))
                add_length(length)
                entry_id += 1
        else:
            fn = self._fn
            for payload in payloads:
                length += len(payload)
                header = pack(lid, entry_id, lac, length)
                add_data(join((header, fn(header, payload), payload)))
                add_length(length)
                entry_id += 1
        return datas, lengths

    def _encode_run(self, first_entry_id: int, lac: int, length: int, payloads):
        """``encode_many`` in one pass: every header (and CRC digest) of the run is a row of one
        numpy array, the header CRCs come from ``_HEADER_CRC_TABLES`` for all rows at once, the
        payload CRCs from one C-level ``map`` of the compiled CRC (the header's CRC as its
        start value), and one ``join`` lays headers and payloads back to back in one buffer."""
        n = len(payloads)
        sizes = np.fromiter(map(len, payloads), np.int64, n)
        lengths = np.cumsum(sizes)
        lengths += length
        d = self.size  # 8 (crc32, crc32c) or 0 (dummy)
        rows = np.empty((n, 4 + d // 8), _BE_I64)
        rows[:, 0] = self.ledger_id
        rows[:, 1] = np.arange(first_entry_id, first_entry_id + n, dtype=np.int64)
        rows[:, 2] = lac
        rows[:, 3] = lengths
        if d:
            kind = self.digest_type
            crc = zlib.crc32 if kind == "crc32" else _crc32c.crc32c
            varying = rows[:, :4].copy().view(np.uint8).reshape(n, ENTRY_HEADER_SIZE)[:, _VARYING]
            header_crcs = np.bitwise_xor.reduce(_HEADER_CRC_TABLES[kind][_VARYING_ROWS, varying],
                                                axis=1)
            header_crcs ^= crc(ENTRY_HEADER.pack(self.ledger_id, 0, lac, 0))
            rows[:, 4] = np.fromiter(map(crc, payloads, header_crcs.tolist()), np.int64, n)
        head = ENTRY_HEADER_SIZE + d
        heads = rows.tobytes()
        parts = [b""] * (2 * n)
        # list(): compiled (Cython), an extended slice of a list takes a list only
        parts[::2] = list(map(heads.__getitem__, map(slice, range(0, head * n, head),
                                                      range(head, head * n + head, head))))
        parts[1::2] = payloads if type(payloads) is list else list(payloads)
        ends = np.cumsum(sizes + head)
        return EntryBatch(b"".join(parts), ends - sizes - head, ends), lengths.tolist()

    def _decode_crc(self, raw) -> LedgerEntry:
        """``decode`` for crc32 / crc32c: one unpack of header and digest, the CRC over views
        (no copy but the payload's), an integer compare (a CRC is no secret)."""
        view = memoryview(raw)
        if len(view) < _CRC_END:
            return self._decode(raw)  # raises with the generic message
        ledger_id, entry_id, lac, length, digest = _HEADER_AND_CRC.unpack_from(view, 0)
        crc = zlib.crc32 if self.digest_type == "crc32" else _crc32c.crc32c
        payload = view[_CRC_END:]
        if ledger_id != self.ledger_id or crc(payload, crc(view[:ENTRY_HEADER_SIZE])) != digest:
            return self._decode(raw)  # raises, naming what is wrong
        return _new_single(ledger_id, entry_id, payload.tobytes(), lac, length)

    def decode_many(self, raws) -> list:
        """Check and unpack the entries of one READ answer.

        Returns:
            per entry, in order, the LedgerEntry or the DigestMismatchError ``decode`` would
            raise (returned, not raised).  ``RawEntries`` of RUN_MIN_ENTRIES or more with a
            CRC digest are decoded from the frames whole, in one pass (an ``EntryRun``); a
            smaller answer (a tailer's, often one entry) entry by entry, where the one pass's
            fixed numpy cost would be most of the price (measured: 16 us per entry for a
            one-entry answer against 2.9 entry by entry; even at about 24 entries).
        """
        if self.size == 8 and isinstance(raws, RawEntries) and len(raws) >= RUN_MIN_ENTRIES:
            out = self._decode_crc_frames(raws.lengths, raws.data)
            if out is not None:
                return out
        return decode_each(self.decode, raws)

    def _decode_crc_frames(self, lengths_frame, data) -> list | None:
        """One pass over a READ answer's two frames: every header and digest in one numpy
        step, the headers' CRCs from ``_WHOLE_HEADER_CRC`` for all rows at once, the payloads'
        (from those) and the payload slices by C-level ``map`` over the whole run, the checks
        (ledger id, digest) as array compares, the entries built in one call
        (``_new_entries``); the slow per-entry path only for an answer holding a bad copy."""
        lengths = np.frombuffer(lengths_frame, dtype=LENGTHS_DTYPE).astype(np.int64)
        if lengths.min() < _CRC_END:
            return None  # a short entry: the generic path names it
        ends = np.cumsum(lengths)
        starts = ends - lengths
        data = data if isinstance(data, bytes) else bytes(data)
        raw_fields = np.frombuffer(data, dtype=np.uint8)[starts[:, None] + _FIELD_BYTES]
        fields = raw_fields.view(_BE_I64).reshape(-1, 5)
        kind = self.digest_type
        crc = zlib.crc32 if kind == "crc32" else _crc32c.crc32c
        table, zero_crc = _WHOLE_HEADER_CRC[kind]
        header_crcs = np.bitwise_xor.reduce(table[_HEADER_ROWS, raw_fields[:, :ENTRY_HEADER_SIZE]],
                                            axis=1)
        header_crcs ^= zero_crc
        take = data.__getitem__
        ends_list = ends.tolist()
        payloads = list(map(take, map(slice, (starts + _CRC_END).tolist(), ends_list)))
        crcs = np.fromiter(map(crc, payloads, header_crcs.tolist()), dtype=np.uint64,
                           count=len(payloads))
        ok = (crcs == fields[:, 4].view(_BE_U64)) & (fields[:, 0] == self.ledger_id)
        columns = (fields[:, 0].tolist(), fields[:, 1].tolist(), payloads,
                   fields[:, 2].tolist(), fields[:, 3].tolist())
        out = EntryRun(_new_entries(*columns))
        out.entry_ids = columns[1]
        out.intact = bool(ok.all())
        if not out.intact:  # a bad copy: the generic check names what is wrong with it
            for i in np.flatnonzero(~ok).tolist():
                s = int(starts[i])
                try:
                    self._decode(data[s:ends_list[i]])
                except DigestMismatchError as exc:
                    out[i] = exc
        return out

    def _decode(self, raw) -> LedgerEntry:
        """Check and unpack a formatted entry.

        Raises:
            DigestMismatchError: short entry, another ledger's entry, or a digest that does not
            match (``entry_id`` set when the header could be read).
        """
        view = memoryview(raw)
        if len(view) < ENTRY_HEADER_SIZE + self.size:
            raise DigestMismatchError(f"ledger {self.ledger_id}: entry of {len(view)} bytes is "
                                      f"shorter than its header and digest",
                                      ledger_id=self.ledger_id)
        ledger_id, entry_id, lac, length = ENTRY_HEADER.unpack_from(view, 0)
        header = bytes(view[:ENTRY_HEADER_SIZE])
        end = ENTRY_HEADER_SIZE + self.size
        payload = view[end:]
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(f"ledger {self.ledger_id}: a bookie returned an entry of "
                                      f"ledger {ledger_id}", ledger_id=self.ledger_id,
                                      entry_id=entry_id)
        if not hmac.compare_digest(self._fn(header, payload), view[ENTRY_HEADER_SIZE:end]):
            raise DigestMismatchError(f"ledger {self.ledger_id} entry {entry_id}: {self.digest_type} "
                                      f"digest mismatch", ledger_id=self.ledger_id,
                                      entry_id=entry_id)
        return _new_single(ledger_id, entry_id, payload.tobytes(), lac, length)
