"""The bookie's ledger rule book: who owns a ledger id, and what may change what a bookie holds.

Everything that decides, for a ledger on this bookie, whether a request may change what is stored
lives here; nothing about a ledger is decided anywhere else in the bookie.  The add worker's live
path, journal replay, compaction and the index rebuild are drivers of the same rules.

Theory of operation
-------------------
Per ledger a bookie keeps one ``StoredLedger``: its *binding* (who owns it), whether it is
fenced, the highest LAC a client wrote explicitly (WRITE_LAC), and whether the GC deleted it.
State changes only through ``LedgerTable.apply(record)`` for the records of
``bookie.storage.records`` (ADD_BATCH, FENCE, LAC), and ``mark_deleted`` for the GC's deletes:

- live:    ``check_add`` / ``check_fence`` / ``check_write_lac`` (refuse, or say which key and
  flags the record carries; they change nothing), the add worker places the record in the
  journal ring and in the entry log, then ``apply(record)``;
- replay:  ``apply(record)`` for every journal record after LastLogMark;
- rebuild: ``apply(record)`` for every record of every entry log, then of the journal, and
  ``mark_deleted`` for every id in the bookie's durable list of deletes;
- compaction copies a ledger's entries with ``StoredLedger.copy_binding`` and writes
  ``StoredLedger.state_records`` beside them, so a rebuild from the new log alone reaches the
  same state.

A binding is one of three:

- **bound**: ``master_key`` is the stored form of the owner's key (``stored_key``: an HMAC under
  the bookie's salt, never the key a client sends), compared in constant time;
- **owned**: the metadata store named the owner (``owner_check``: the ledger's ``key_check``,
  a slow one-way check of the master key) but no request with the key itself has reached this
  bookie yet: a request's key is checked against it once, and the first one that passes binds;
- **unbound**: neither (a ledger whose metadata carries no ``key_check``: an older client's, or
  a bookie run with no metadata store).

Invariants
----------
1. **One owner, fixed at creation.**  A bookie that meets an id it holds nothing for asks the
   metadata store *before* it stores or fences anything (``Owner``, looked up by the worker,
   cached and rate-limited there).  An id the store does not know: NO_LEDGER, nothing stored.
   A key the ledger's ``key_check`` does not name: UNAUTHORIZED, nothing stored.  Once a
   binding exists it never moves, whatever the metadata says later: the store is asked only
   about ids the bookie holds nothing for, so no later write of the metadata can take an id
   from its owner, and nothing is ever purged to make room for another key.
2. **Older ledgers and store-less bookies keep first-add binding.**  For a ledger whose
   metadata has no ``key_check`` (``Owner.NO_CHECK``), or on a bookie with no metadata store
   (``Owner.NO_STORE``: raw wire tools), the first ADD_BATCH binds its key; a fence of such an
   id binds nothing and creates it fenced and unbound; the first add with a key then binds it.
3. **Copies on the recovery credential belong to the owner.**  A recovery add or fence flagged
   RECOVERY_CREDENTIAL carries the ledger's credential derived from the cluster's recovery
   secret (``bookie.metadata.recovery_secret``), checked in constant time.  Its record carries
   the ledger's stored key when bound, the owner's check (``FLAG_OWNER_CHECK``) when owned or
   when the store names one, and no key only for an unbound ledger: healed copies are never
   left for whoever adds first.  The flag never passes on a normal add or a WRITE_LAC.
4. **Once fenced, never unfenced; a fence is persisted before it is acknowledged.**  A fenced
   ledger refuses normal adds (FENCED) and accepts recovery adds.  Every FENCE record goes to
   the journal and to the entry log, and compaction writes the fence again beside the copies
   (``state_records``): journal rolls, compactions and rebuilds keep it.
5. **The explicit LAC only grows**, and is kept by the entry logs and compaction as the fence is.
6. **A deleted ledger stays deleted.**  The GC appends the id to the bookie's durable list of
   deletes before it writes the index's tombstone (ids are never reused); from then on every
   request for it is NO_LEDGER and every record of it changes nothing and stores nothing: adds
   in flight, a late fence, a journal replay, a rebuild from logs that still hold its entries.
7. **Entries are write-once** (enforced by the add worker with the storage's lookup, since this
   module holds no entries): an add of an entry the bookie holds with identical bytes is
   answered OK and stores nothing; with other bytes it is refused (ENTRY_EXISTS) and nothing
   changes.  The client's resends (ensemble change, recovery, autorecovery) send the bytes
   first sent, so only a forger meets the refusal.
8. **apply is idempotent, and commutes for the records the live path lets through** (they all
   carry the owner's key, or its check, or are keyless copies of an unbound ledger).  So
   replaying the journal from any LastLogMark over an index at least as new as that mark, and
   applying every log's records in any order, both yield the table the live path built:
   rebuild(logs) == live state.
9. **What is indexed is held, until the ledger is deleted.**  Whenever entries of a ledger are
   indexed (a live add, a recovery add, a copy from autorecovery, a journal replay, a rebuild),
   the index holds the ledger's record too: a commit writes it when the index lacks it
   (``records_to_write``).  The GC's drop of over-replicated copies (``bookie.core.naming``)
   takes the entries out of the index and *keeps* the record (``Index.drop_copies``): its binding,
   fence and explicit LAC stay, so the fenced-out writer stays refused and a later copy to this
   bookie (chosen again as a replacement) is indexed under the same record; the dropped bytes
   leave the entry logs' ledger maps (their count goes to 0, the ledger stays named there, so
   compaction still restates its fence, and its binding in an ADD_BATCH of no entries).  Compaction and the log GC count an indexed entry live
   unless its ledger is in the deleted table (``held``), whether or not a record names it.
   A rebuild from the entry logs alone may bring dropped copies back (the same bytes: entries
   are write-once); the GC drops them again after its wait.  So over drops, rebuild(logs)
   holds every entry and the same records as the live state, and at most the dropped copies more.

The table is plain code: no sockets, no files.  Ledgers it does not hold in memory come from a
``load`` function (the add worker reads the index); ``dirty`` names the ledgers whose stored
form changed since the caller last persisted them.
"""

from __future__ import annotations

import enum
import hmac
from typing import Callable, NamedTuple

from bookie import wire
from bookie.metadata.ledger import key_check_matches
from bookie.metadata.recovery_secret import credential as recovery_credential
from bookie.wire import Status

# The kinds of record the rules act on (bookie.storage.records encodes them; these numbers are
# its on-disk type codes and flag bits).
ADD_BATCH, FENCE, LAC = 1, 2, 3
FLAG_RECOVERY = 1  # a recovery add (ADD_BATCH)
FLAG_STORED_KEY = 2  # the key field holds the stored form, not the client's key
FLAG_VERIFIED = 4  # FENCE: its key was checked against the owner the store named: it binds
FLAG_OWNER_CHECK = 8  # the key field holds the owner's key_check (a copy or fence on the credential)


class Rejected(Exception):
    """A request the bookie refuses; ``status`` is the answer the client gets."""

    def __init__(self, status: Status, message: str = ""):
        super().__init__(message)
        self.status = status


class Owner(enum.Enum):
    """What the metadata store says of an id this bookie holds nothing for (the worker asks;
    a ``bytes`` answer is the ledger's ``key_check``)."""

    UNKNOWN = "unknown"  # the store has no such ledger: nothing may be stored under the id
    NO_CHECK = "no-check"  # the ledger exists but its metadata names no key (an older client)
    NO_STORE = "no-store"  # this bookie has no metadata store (raw wire tools)
    UNAVAILABLE = "unavailable"  # the store cannot be asked now (down, or past the lookup budget)



class Placed(NamedTuple):
    """What a record placed for an accepted request carries: its key field and flags."""

    key: bytes
    flags: int


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
    nor another ledger.
    """
    return hmac.digest(salt, _KDF_LABEL + wire.LEDGER_ID.pack(ledger_id) + bytes(master_key), "sha256")


class StoredLedger:
    """What this bookie knows of one ledger.  The index's ``ledgers`` table holds ``as_dict`` of
    a live ledger; a deleted one is a tombstone in the index's ``deleted`` table instead.

    ``master_key`` is the stored form (``stored_key``), b"" until a key binds the ledger;
    ``owner_check`` the owner's ``key_check`` while owned but not bound (b"" otherwise);
    ``legacy`` marks a raw key read from an older index."""

    __slots__ = ("master_key", "owner_check", "fenced", "lac", "deleted", "legacy")

    def __init__(self, master_key: bytes, fenced: bool = False, lac: int = -1, deleted: bool = False,
                 legacy: bool = False, owner_check: bytes = b""):
        self.master_key = master_key
        self.owner_check = b"" if master_key else owner_check
        self.fenced = fenced
        self.lac = lac
        self.deleted = deleted
        self.legacy = legacy

    @classmethod
    def tombstone(cls) -> "StoredLedger":
        return cls(b"", deleted=True)

    def as_dict(self) -> dict:
        d = {"key": self.master_key.hex(), "kdf": KDF, "fenced": self.fenced, "lac": self.lac}
        if self.owner_check:
            d["own"] = self.owner_check.hex()
        return d

    @classmethod
    def from_dict(cls, raw: dict) -> "StoredLedger":
        return cls(bytes.fromhex(raw["key"]), bool(raw["fenced"]), int(raw.get("lac", -1)),
                   legacy=raw.get("kdf") != KDF, owner_check=bytes.fromhex(raw.get("own", "")))

    def bind(self, key: bytes) -> None:
        self.master_key = key
        self.owner_check = b""

    # -- what compaction writes (invariants 4, 5, 8) ---------------------------------------------
    def copy_binding(self) -> Placed:
        """Key and flags of the ADD_BATCH records that carry this ledger's entries into a new
        log: applied to an empty table, they bind it exactly as it is bound here."""
        if self.master_key:
            return Placed(self.master_key, FLAG_STORED_KEY)
        if self.owner_check:
            return Placed(self.owner_check, FLAG_OWNER_CHECK | FLAG_RECOVERY)
        return Placed(b"", FLAG_STORED_KEY | FLAG_RECOVERY)

    def state_records(self) -> list[tuple[int, Placed, int]]:
        """(type, key and flags, lac) of the records that restate this ledger's fence and
        explicit LAC, written by compaction beside the copies of its entries."""
        out = []
        if self.fenced:
            if self.master_key:
                out.append((FENCE, Placed(self.master_key, FLAG_STORED_KEY | FLAG_VERIFIED), -1))
            elif self.owner_check:
                out.append((FENCE, Placed(self.owner_check, FLAG_OWNER_CHECK), -1))
            else:
                out.append((FENCE, Placed(b"", FLAG_STORED_KEY), -1))
        if self.lac >= 0 and self.master_key:
            out.append((LAC, Placed(self.master_key, FLAG_STORED_KEY), self.lac))
        return out

    def __eq__(self, other) -> bool:
        if not isinstance(other, StoredLedger) or self.deleted != other.deleted:
            return False
        return self.deleted or self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return "StoredLedger(deleted)" if self.deleted else f"StoredLedger({self.as_dict()})"


class LedgerTable:
    """The ledgers of one bookie and the rules over them (see the module docstring)."""

    def __init__(self, load: Callable[[int], StoredLedger | None] | None = None, salt: bytes = b"",
                 recovery_secret: bytes | None = None,
                 verify: Callable[[bytes, bytes], bool] = key_check_matches):
        self._load = load or (lambda ledger_id: None)
        # verify(check, master_key): does the owner's check name this key (a slow, memory-hard
        # verifier: the add worker answers it off its loop and hands the answers in here)
        self.verify = verify
        self.salt = salt
        self.recovery_secret = recovery_secret  # None: RECOVERY_CREDENTIAL is refused
        self.ledgers: dict[int, StoredLedger] = {}
        self.dirty: set[int] = set()
        # LAC records met before their ledger is bound: ledger id -> {stored key: highest LAC}.
        # The live path stores a LAC record only for a bound ledger, but a rebuild may read it
        # first: it reads the logs in id order, and compaction restates a ledger's fence and
        # copies its entries into a log newer than a LAC written after them.  Invariant 8 says
        # the order does not matter, so such a LAC waits here for the record that binds its
        # ledger to its key, and is applied then; never bound so, it changes nothing.
        self._early_lacs: dict[int, dict[bytes, int]] = {}

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

    def needs_owner(self, ledger_id: int) -> bool:
        """True when a request for this id cannot be decided without the store's ``Owner``
        answer (invariant 1): the bookie holds nothing for it."""
        return self.get(ledger_id) is None

    def owner_check_of(self, ledger_id: int) -> bytes:
        """The check a key must pass for a ledger owned here but not bound yet (b"" when none:
        bound, unbound, deleted or unknown)."""
        info = self.get(ledger_id)
        return info.owner_check if info is not None and not info.deleted and not info.master_key else b""

    # -- the live path's decisions (change nothing) ----------------------------------------------
    def _owner_of_new(self, owner) -> bytes | None:
        """The check of an id held nowhere here: bytes (the store's key_check), or None for
        first-add binding (invariant 2); Rejected when nothing may be stored."""
        if owner is Owner.UNKNOWN:
            raise Rejected(Status.NO_LEDGER, "the metadata store has no such ledger")
        if owner is Owner.UNAVAILABLE or owner is None:
            raise Rejected(Status.TOO_MANY_REQUESTS, "cannot ask the metadata store who owns the ledger now")
        if isinstance(owner, (bytes, bytearray)) and owner:
            return bytes(owner)
        return None  # Owner.NO_CHECK, Owner.NO_STORE, or an empty check

    def _checked_key(self, ledger_id: int, master_key: bytes, owner) -> tuple[StoredLedger | None, bytes, bool]:
        """(the ledger or None, the key's stored form, whether the key was verified against
        the owner the store named); Rejected when the key is not the owner's."""
        check_key_size(master_key)
        info = self.get(ledger_id)
        key = self.stored_key(ledger_id, master_key)
        if info is None:
            check = self._owner_of_new(owner)
            if check is None:
                return None, key, False
            if not self.verify(check, master_key):
                raise Rejected(Status.UNAUTHORIZED, "the ledger's metadata names another key")
            return None, key, True
        if info.deleted:
            raise Rejected(Status.NO_LEDGER)
        if info.master_key:
            # constant time: the answer must not tell how much of a guessed key was right
            if not hmac.compare_digest(info.master_key, key):
                raise Rejected(Status.UNAUTHORIZED)
            return info, key, True
        if info.owner_check:
            if not self.verify(info.owner_check, master_key):
                raise Rejected(Status.UNAUTHORIZED, "the ledger's metadata names another key")
            return info, key, True
        return info, key, False

    def check_credential(self, ledger_id: int, credential: bytes, owner=None) -> Placed:
        """Raises Rejected unless ``credential`` is the ledger's recovery credential (invariant 3).

        Returns:
            the key and flags of the record: the stored key when bound here, the owner's check
            when owned or named by the store, else no key.
        """
        if not self.recovery_secret:
            raise Rejected(Status.UNAUTHORIZED, "this bookie has no recovery secret")
        if not hmac.compare_digest(bytes(credential), recovery_credential(self.recovery_secret, ledger_id)):
            raise Rejected(Status.UNAUTHORIZED, "wrong recovery credential")
        info = self.get(ledger_id)
        if info is None:
            check = self._owner_of_new(owner)
            return Placed(check, FLAG_OWNER_CHECK) if check else Placed(b"", FLAG_STORED_KEY)
        if info.deleted:
            raise Rejected(Status.NO_LEDGER)
        if info.master_key:
            return Placed(info.master_key, FLAG_STORED_KEY)
        if info.owner_check:
            return Placed(info.owner_check, FLAG_OWNER_CHECK)
        return Placed(b"", FLAG_STORED_KEY)

    def check_add(self, ledger_id: int, master_key: bytes, recovery: bool, credential: bool = False,
                  owner=None) -> Placed:
        """Raises Rejected unless an ADD_BATCH with this key (and recovery flag) may be placed;
        with ``credential`` the key is the ledger's recovery credential.  ``owner`` is the
        store's answer, needed when ``needs_owner`` (invariant 1).

        Returns:
            the key and flags of the record.
        """
        if credential:
            if not recovery:
                raise Rejected(Status.BAD_REQUEST, "the recovery credential only on recovery adds")
            placed = self.check_credential(ledger_id, master_key, owner)
            return Placed(placed.key, placed.flags | FLAG_RECOVERY)
        info, key, _ = self._checked_key(ledger_id, master_key, owner)
        if info is not None and info.fenced and not recovery:
            raise Rejected(Status.FENCED)
        return Placed(key, FLAG_STORED_KEY | (FLAG_RECOVERY if recovery else 0))

    def check_fence(self, ledger_id: int, master_key: bytes, credential: bool = False,
                    owner=None) -> Placed:
        """Raises Rejected unless a FENCE with this key (with ``credential``: the ledger's
        recovery credential) may be placed.

        Returns:
            the key and flags of the FENCE record: a key verified against the owner binds the
            ledger (``FLAG_VERIFIED``); an unverified fence (invariant 2) binds nothing and
            carries no key.
        """
        if credential:
            return self.check_credential(ledger_id, master_key, owner)
        _, key, verified = self._checked_key(ledger_id, master_key, owner)
        if not verified:  # a fence no owner vouches for binds nothing, so it carries no key
            return Placed(b"", FLAG_STORED_KEY)
        return Placed(key, FLAG_STORED_KEY | FLAG_VERIFIED)

    def check_write_lac(self, ledger_id: int, master_key: bytes) -> Placed:
        """Raises Rejected unless a LAC record with this key may be placed: NO_LEDGER when no
        key bound the ledger here (an explicit LAC binds nothing, and asks no store)."""
        info = self.get(ledger_id)
        if info is None or info.deleted or not info.master_key:
            check_key_size(master_key)
            raise Rejected(Status.NO_LEDGER, "no add bound this ledger on this bookie")
        _, key, _ = self._checked_key(ledger_id, master_key, None)
        return Placed(key, FLAG_STORED_KEY)

    # -- the one state change --------------------------------------------------------------------
    def apply(self, rec) -> bool:
        """Apply one record (placed by the live path, replayed from the journal, or read from an
        entry log by a rebuild).  ``rec`` has ``type``, ``flags``, ``ledger_id``,
        ``master_key`` and ``lac`` (``bookie.storage.records.Record``).

        Returns:
            True when the record belongs in storage: an ADD_BATCH's entries, a FENCE or LAC
            record itself in the entry log; False when it changes nothing and stores nothing.
        """
        key = rec.master_key
        flags = rec.flags
        check = b""
        if flags & FLAG_OWNER_CHECK:
            check, key = bytes(key), b""
        elif key and not flags & FLAG_STORED_KEY:  # written by an older bookie
            key = self.stored_key(rec.ledger_id, key)
        info = self.get(rec.ledger_id)
        if rec.type == LAC and key and (info is None or not (info.deleted or info.master_key)):
            return self._hold_early_lac(rec.ledger_id, key, rec.lac)  # an explicit LAC binds nothing
        if info is None:
            info = StoredLedger(b"", owner_check=check)
            if key and (rec.type == ADD_BATCH or flags & FLAG_VERIFIED):
                info.bind(key)  # invariants 1 and 2: the owner's key, or the first add's
            self.ledgers[rec.ledger_id] = info
            self.dirty.add(rec.ledger_id)
        elif info.deleted:
            return False  # invariant 6
        elif info.master_key:
            if key and not hmac.compare_digest(info.master_key, key):
                return False  # not the owner's key: never stored
            if not key and not check and rec.type != FENCE and not (
                    rec.type == ADD_BATCH and flags & FLAG_RECOVERY):
                return False  # keyless: only copies (recovery adds) and fences
        else:  # owned or unbound
            if key and (rec.type == ADD_BATCH or (rec.type == FENCE and flags & FLAG_VERIFIED)):
                info.bind(key)  # the live path checked it against the owner (or first add)
                self.dirty.add(rec.ledger_id)
            elif check and not info.owner_check:
                info.owner_check = check
                self.dirty.add(rec.ledger_id)
            elif rec.type == LAC:
                return False  # keyless: it names no owner
            elif rec.type == ADD_BATCH and not key and not flags & FLAG_RECOVERY:
                return False
        if rec.type == FENCE:
            if not info.fenced:
                info.fenced = True
                self.dirty.add(rec.ledger_id)
        elif rec.type == LAC:
            if rec.lac > info.lac:
                info.lac = rec.lac
                self.dirty.add(rec.ledger_id)
        if self._early_lacs and info.master_key and rec.ledger_id in self._early_lacs:
            early = self._early_lacs.pop(rec.ledger_id).get(info.master_key, -1)
            if early > info.lac:
                info.lac = early
                self.dirty.add(rec.ledger_id)
        return True

    def _hold_early_lac(self, ledger_id: int, key: bytes, lac: int) -> bool:
        """Keep a LAC record of a ledger not bound yet (see ``_early_lacs``).  True: the record
        belongs in storage as any LAC record the live path stored."""
        held = self._early_lacs.setdefault(ledger_id, {})
        held[key] = max(lac, held.get(key, -1))
        return True

    def records_to_write(self, indexed, has_record: Callable[[int], bool]) -> set[int]:
        """The ledgers whose record a commit writes (invariant 9): every dirty one, and every
        ledger whose entries it indexes that ``has_record`` says the index holds no record of
        (dropped meanwhile, or by an older bookie).  ``indexed``: ids whose entries the commit
        indexes; ``has_record(id)``: asked inside the commit's own transaction."""
        out = set(self.dirty)
        for ledger_id in indexed:
            info = self.ledgers.get(ledger_id)
            if ledger_id not in out and info is not None and not info.deleted and not has_record(ledger_id):
                out.add(ledger_id)
        return out

    def mark_deleted(self, ledger_id: int) -> None:
        """The GC deleted the ledger (invariant 6): it stays deleted."""
        self.ledgers[ledger_id] = StoredLedger.tombstone()
        self._early_lacs.pop(ledger_id, None)
        self.dirty.discard(ledger_id)


# -- copies held, dropped and held again (invariant 9) --------------------------------------------

def held(has_record: bool, has_entries: bool, deleted: bool) -> bool:
    """Whether this bookie holds a ledger, for compaction and the log GC (invariant 9): not
    deleted, and named by a record or by any indexed entry.  A ledger whose copies were
    dropped keeps its record and is held (its fence, its binding); its dropped bytes are not
    live because the drop took them out of the logs' ledger maps."""
    return not deleted and (has_record or has_entries)
