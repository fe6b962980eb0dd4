"""The bookie's ledger table: every per-ledger rule, one copy for the live add path and replay.

Theory of operation
-------------------
Per ledger a bookie keeps one ``StoredLedger``: the master key the ledger is bound to, whether
it is fenced, the highest LAC a client wrote explicitly (WRITE_LAC), and whether the GC deleted
it.  Nothing about a ledger is decided anywhere else in the bookie.

State changes only through ``LedgerTable.apply(record)``, for the records of
``bookie.storage.records`` (ADD_BATCH, FENCE, LAC), and ``mark_deleted`` when the GC's tombstone
turns up.  The add worker's live path and journal replay are two drivers of the same step:

- live:   ``check_add`` / ``check_fence`` / ``check_write_lac`` (may refuse the request, changes
  nothing), then the add worker places the record in the journal ring, then ``apply(record)``;
- replay: ``apply(record)`` for every journal record after LastLogMark.

The rules, and the invariants they keep:

1. **A ledger id is bound to its master key by its first ADD_BATCH, never by a fence or an
   explicit LAC.**  A request with another key is UNAUTHORIZED; a record with another key
   changes nothing.  The table never holds the key a client sends: it holds
   ``stored_key(ledger_id, key)``, an HMAC-SHA256 keyed with the bookie's salt (its cookie's
   instance id) over the ledger id and the key, and compares in constant time; the index, the
   journal and the entry logs hold only that form (records carry ``FLAG_STORED_KEY``; a record
   without it, written by an older bookie, is derived on replay, and an index record without
   ``kdf`` is derived when loaded and written back).
2. **Once fenced, never unfenced.**  No record clears ``fenced``.  A fenced ledger refuses
   normal adds (FENCED) and accepts recovery adds.  Fencing a ledger the bookie has never seen
   creates it fenced and *unbound* (no key): normal adds stay refused (the fence must hold for a
   writer that had not reached this bookie yet) and the first recovery add binds its key.  A
   WRITE_LAC for a ledger the bookie holds no key for is NO_LEDGER and stores nothing.
3. **A fence is persisted before it is acknowledged.**  The live path answers a fence (and an
   add, and a WRITE_LAC) only once the journal has made its record durable; this module only
   decides, the add worker's pending queue holds the answer back.
4. **The explicit LAC only grows.**
5. **A deleted ledger stays deleted.**  The GC deletes a ledger the metadata store no longer
   has and leaves a tombstone in the index (ledger ids are never reused).  A ledger the store
   never created (its id above the store's high-water mark, ``bookie.core.gc_policy``) is
   *purged* instead: no tombstone, and ``forget`` drops it from the table, so that a binding
   squatted ahead of the id's creation does not outlive the next GC pass.  From then on every
   request for it is NO_LEDGER and every record of it changes nothing and stores nothing: adds
   that were in flight, a late fence, a journal replay.  The live path may learn of a deletion
   only when it commits records placed on a stale view (``mark_deleted``); their entries are
   then dropped and their answers become NO_LEDGER.
6. **The cluster recovery credential acts for the ledger's key, and binds nothing.**  A recovery
   add or a fence flagged RECOVERY_CREDENTIAL carries, instead of the master key, the ledger's
   credential derived from the cluster's recovery secret (``bookie.metadata.recovery_secret``),
   which autorecovery can compute for any ledger.  ``check_credential`` compares it in constant
   time with the one this bookie derives (UNAUTHORIZED when wrong, or when the bookie has no
   secret: no metadata store); a deleted ledger stays NO_LEDGER.  The record then carries the
   ledger's stored key when it is bound here - so apply and replay treat it exactly as the
   writer's own recovery add or fence - and no key when it is not: the ledger stays unbound
   (copies stored, normal adds still bound by the first add with a real key; a fence unbound as
   in rule 2).  The flag never passes on a normal add or a WRITE_LAC.
7. **A binding the metadata store refutes is purged** (``claimed_by_other``, and the add
   worker with ``bookie.workers.claims``).  A writer stores a one-way check of its ledger's
   master key in the ledger's metadata (``key_check``).  When a request with key K meets a
   ledger bound here to another key, or fenced while unbound by another key (an unbound fence
   records the stored form of its key, ``fenced_by``: the first fencer's, b"" once two keys or
   the recovery credential have fenced it), the add worker asks the store; if the check says K
   is the writer's, what this bookie holds under the id came from someone who reached the id
   before its writer did.  It is purged exactly as the GC purges a never-created id (rule 5),
   and K's request goes on as the first one the id has seen.  A fence by the writer's key, or
   by the recovery credential, is never purged: it holds as rule 2 says.
8. **apply is idempotent, and commutes for the records the live path lets through** (they all
   carry the ledger's key, or are keyless recovery copies: one that meets a ledger bound since
   is still stored).  So replaying the journal from any LastLogMark over an index at
   least as new as that mark yields the table the live path built.

The table is plain code: no sockets, no files.  Ledgers it does not hold in memory come from a
``load`` function (the add worker reads the index); ``dirty`` names the ledgers whose stored
form changed since the caller last persisted them.
"""

from __future__ import annotations

import hmac
from typing import Callable

from bookie import wire
from bookie.metadata.recovery_secret import credential as recovery_credential
from bookie.wire import Status


# The kinds of record the rules act on (bookie.storage.records encodes them; these numbers are
# its on-disk type codes and flag bits).
ADD_BATCH, FENCE, LAC = 1, 2, 3
FLAG_RECOVERY = 1  # a recovery add (ADD_BATCH)
FLAG_STORED_KEY = 2  # the key field holds the stored form, not the client's key


class Rejected(Exception):
    """A request the bookie refuses; ``status`` is the answer the client gets."""

    def __init__(self, status: Status, message: str = ""):
        super().__init__(message)
        self.status = status


def check_key_size(key: bytes) -> None:
    """Raises Rejected(BAD_REQUEST) unless the master key is 1..MAX_MASTER_KEY bytes."""
    if len(key) == 0 or len(key) > wire.MAX_MASTER_KEY:
        raise Rejected(Status.BAD_REQUEST, f"master key of {len(key)} bytes (1..{wire.MAX_MASTER_KEY})")


KDF = "hmac-sha256"  # the index's name for the stored form of a master key
_KDF_LABEL = b"bookie-ledger-master-key\0"


def stored_key(salt: bytes, ledger_id: int, master_key: bytes) -> bytes:
    """The form of a master key the bookie keeps: HMAC-SHA256(salt, label | ledger id | key).

    One-way, so the index, the journal and the entry logs do not hand out the key a client must
    send; salted per bookie and per ledger, so one table of guesses serves neither another bookie
    nor another ledger.  (A weak password stays guessable by whoever reads both the salt and the
    index: the files are the bookie user's alone for that reason.)
    """
    return hmac.digest(salt, _KDF_LABEL + wire.LEDGER_ID.pack(ledger_id) + bytes(master_key), "sha256")


class StoredLedger:
    """What this bookie knows of one ledger.  The index's ``ledgers`` table holds ``as_dict`` of
    a live ledger; a deleted one is a tombstone in the index's ``deleted`` table instead.

    ``master_key`` is the stored form (``stored_key``), b"" while the ledger is unbound (fenced
    before any add reached this bookie); ``legacy`` marks a raw key read from an older index."""

    __slots__ = ("master_key", "fenced", "lac", "deleted", "legacy", "fenced_by")

    def __init__(self, master_key: bytes, fenced: bool = False, lac: int = -1, deleted: bool = False,
                 legacy: bool = False, fenced_by: bytes = b""):
        self.master_key = master_key
        self.fenced = fenced
        self.lac = lac
        self.deleted = deleted
        self.legacy = legacy
        self.fenced_by = fenced_by  # unbound and fenced: the stored key of its one fencer (rule 7)

    @classmethod
    def tombstone(cls) -> "StoredLedger":
        return cls(b"", deleted=True)

    def as_dict(self) -> dict:
        d = {"key": self.master_key.hex(), "kdf": KDF, "fenced": self.fenced, "lac": self.lac}
        if self.fenced_by:
            d["fby"] = self.fenced_by.hex()
        return d

    @classmethod
    def from_dict(cls, raw: dict) -> "StoredLedger":
        return cls(bytes.fromhex(raw["key"]), bool(raw["fenced"]), int(raw.get("lac", -1)),
                   legacy=raw.get("kdf") != KDF, fenced_by=bytes.fromhex(raw.get("fby", "")))

    def __eq__(self, other) -> bool:
        if not isinstance(other, StoredLedger) or self.deleted != other.deleted:
            return False
        return self.deleted or self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return "StoredLedger(deleted)" if self.deleted else f"StoredLedger({self.as_dict()})"


class LedgerTable:
    """The ledgers of one bookie and the rules over them (see the module docstring)."""

    def __init__(self, load: Callable[[int], StoredLedger | None] | None = None, salt: bytes = b"",
                 recovery_secret: bytes | None = None):
        self._load = load or (lambda ledger_id: None)
        self.salt = salt
        self.recovery_secret = recovery_secret  # None: RECOVERY_CREDENTIAL is refused (rule 6)
        self.ledgers: dict[int, StoredLedger] = {}
        self.dirty: set[int] = set()

    def stored_key(self, ledger_id: int, master_key: bytes) -> bytes:
        """The form of ``master_key`` this bookie stores and compares (see ``stored_key``)."""
        return stored_key(self.salt, ledger_id, master_key)

    def get(self, ledger_id: int) -> StoredLedger | None:
        """The ledger as this bookie knows it; None when it has no record of it."""
        info = self.ledgers.get(ledger_id)
        if info is None:
            info = self._load(ledger_id)
            if info is not None:
                if info.legacy:  # a raw key from an older index: keep only its stored form
                    info.legacy = False
                    if info.master_key:
                        info.master_key = self.stored_key(ledger_id, info.master_key)
                    self.dirty.add(ledger_id)
                self.ledgers[ledger_id] = info
        return info

    # -- the live path's decisions (change nothing) ----------------------------------------------
    def _check_key(self, ledger_id: int, master_key: bytes) -> tuple[StoredLedger | None, bytes]:
        """(the ledger or None, the key's stored form); Rejected when the key does not match."""
        check_key_size(master_key)
        info = self.get(ledger_id)
        key = self.stored_key(ledger_id, master_key)
        if info is not None:
            if info.deleted:
                raise Rejected(Status.NO_LEDGER)
            # constant time: the answer must not tell how much of a guessed key was right
            if info.master_key and not hmac.compare_digest(info.master_key, key):
                raise Rejected(Status.UNAUTHORIZED)
        return info, key

    def check_credential(self, ledger_id: int, credential: bytes) -> bytes:
        """Raises Rejected unless ``credential`` is the ledger's recovery credential (rule 6).

        Returns:
            the key for the record: the ledger's stored key when it is bound here, else b"".
        """
        if not self.recovery_secret:
            raise Rejected(Status.UNAUTHORIZED, "this bookie has no recovery secret")
        if not hmac.compare_digest(bytes(credential), recovery_credential(self.recovery_secret, ledger_id)):
            raise Rejected(Status.UNAUTHORIZED, "wrong recovery credential")
        info = self.get(ledger_id)
        if info is not None and info.deleted:
            raise Rejected(Status.NO_LEDGER)
        return info.master_key if info is not None else b""

    def check_add(self, ledger_id: int, master_key: bytes, recovery: bool, credential: bool = False) -> bytes:
        """Raises Rejected unless an ADD_BATCH with this key (and recovery flag) may be placed;
        with ``credential`` the key is the ledger's recovery credential (rule 6).

        Returns:
            the key's stored form, for the record.
        """
        if credential:
            if not recovery:
                raise Rejected(Status.BAD_REQUEST, "the recovery credential only on recovery adds")
            return self.check_credential(ledger_id, master_key)
        info, key = self._check_key(ledger_id, master_key)
        if info is not None and info.fenced and not recovery:
            raise Rejected(Status.FENCED)
        return key

    def check_fence(self, ledger_id: int, master_key: bytes, credential: bool = False) -> bytes:
        """Raises Rejected unless a FENCE with this key (with ``credential``: the ledger's
        recovery credential, rule 6) may be placed.

        Returns:
            the key's stored form, for the FENCE record.  On a ledger this bookie holds no key
            for, the fence binds nothing (rule 2): ``apply`` keeps the key as ``fenced_by``.
            With ``credential``: the ledger's stored key, or b"" when it is unbound here.
        """
        if credential:
            return self.check_credential(ledger_id, master_key)
        return self._check_key(ledger_id, master_key)[1]

    def claimed_by_other(self, ledger_id: int, master_key: bytes) -> bool:
        """True when another key holds this ledger here: it is bound to another key, or fenced
        while unbound by another single key (rule 7: the metadata store may refute that)."""
        info = self.get(ledger_id)
        if info is None or info.deleted:
            return False
        key = self.stored_key(ledger_id, master_key)
        held = info.master_key or (info.fenced_by if info.fenced else b"")
        return bool(held) and not hmac.compare_digest(held, key)

    def check_write_lac(self, ledger_id: int, master_key: bytes) -> bytes:
        """Raises Rejected unless a LAC record with this key may be placed: NO_LEDGER when no
        add bound the ledger here.  Returns the key's stored form, for the record."""
        info, key = self._check_key(ledger_id, master_key)
        if info is None or not info.master_key:
            raise Rejected(Status.NO_LEDGER, "no add bound this ledger on this bookie")
        return key

    # -- the one state change --------------------------------------------------------------------
    def apply(self, rec) -> bool:
        """Apply one record (placed just now by the live path, or replayed from the journal).

        Returns:
            True when the record is an ADD_BATCH whose entries belong in storage.
        """
        key = rec.master_key
        if key and not rec.flags & FLAG_STORED_KEY:  # written by an older bookie
            key = self.stored_key(rec.ledger_id, key)
        info = self.get(rec.ledger_id)
        if info is None:
            if rec.type == LAC:
                return False  # rule 2: an explicit LAC binds nothing
            # rule 1: an add binds its key; rule 2: a fence creates the ledger fenced, unbound
            info = StoredLedger(key if rec.type == ADD_BATCH else b"")
            self.ledgers[rec.ledger_id] = info
            self.dirty.add(rec.ledger_id)
            if rec.type == FENCE:
                info.fenced_by = key  # rule 7: who fenced it (b"": the recovery credential)
        elif info.deleted:
            return False  # rule 5: deleted for good
        elif not info.master_key:
            if rec.type == ADD_BATCH and key:  # the first add binds an unbound ledger
                info.master_key = key
                info.fenced_by = b""
                self.dirty.add(rec.ledger_id)
            elif rec.type == FENCE and (not info.fenced or info.fenced_by not in (b"", key)):
                # rule 7: its one fencer; b"" once fenced by two keys (or the credential)
                info.fenced_by = b"" if info.fenced else key
                self.dirty.add(rec.ledger_id)
            elif rec.type == LAC:
                return False
        elif key and not hmac.compare_digest(info.master_key, key):
            return False  # rule 1: the key of the first add holds
        elif not key and rec.type != FENCE and not (
                rec.type == ADD_BATCH and rec.flags & FLAG_RECOVERY):
            return False  # (a keyless recovery add: a credential copy placed while unbound, rule 8)
        if rec.type == FENCE:
            if not info.fenced:
                info.fenced = True
                self.dirty.add(rec.ledger_id)
        elif rec.type == LAC:
            if rec.lac > info.lac:
                info.lac = rec.lac
                self.dirty.add(rec.ledger_id)
        return rec.type == ADD_BATCH

    def forget(self, ledger_id: int) -> None:
        """The GC purged the ledger (the metadata store never created it): drop what the table
        holds of it, so that the ledger that later gets the id is bound by its own first add."""
        self.ledgers.pop(ledger_id, None)
        self.dirty.discard(ledger_id)

    def mark_deleted(self, ledger_id: int) -> None:
        """The GC deleted the ledger (its tombstone is in the index): it stays deleted."""
        self.ledgers[ledger_id] = StoredLedger.tombstone()
        self.dirty.discard(ledger_id)
