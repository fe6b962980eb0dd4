"""The bookie's ledger table (bookie.core.ledgers): its rules one by one, and the property
that the live add path and a journal replay from any LastLogMark build the same table."""

import pytest
from hypothesis import given, settings, strategies as st

from bookie.testing.rawclient import make_entry
from bookie.wire import Status
from bookie.storage import records
from bookie.core.ledgers import LedgerTable, Owner, Rejected, StoredLedger, stored_key

NO_STORE = Owner.NO_STORE  # a bookie without a metadata store: first-add binding

KEY = b"right-key"
OTHER = b"other-key"
SALT = b""  # LedgerTable()'s salt


def sk(ledger_id: int, key: bytes) -> bytes:
    """The stored form of a client's key (what records and the table hold)."""
    return stored_key(SALT, ledger_id, key) if key else b""


def add_record(ledger_id: int, key: bytes, entry_id: int = 0, recovery: bool = False) -> records.Record:
    entry = make_entry(ledger_id, entry_id, b"payload")
    parts, _, _ = records.add_batch_parts(ledger_id, sk(ledger_id, key), len(entry).to_bytes(4, "little"),
                                          entry, recovery)
    return records.parse(b"".join(parts), 0)


def fence_record(ledger_id: int, key: bytes) -> records.Record:
    return records.parse(records.fence_record(ledger_id, sk(ledger_id, key)), 0)


def lac_record(ledger_id: int, lac: int, key: bytes) -> records.Record:
    return records.parse(records.lac_record(ledger_id, lac, sk(ledger_id, key)), 0)


def legacy(rec_bytes: bytes) -> records.Record:
    """A record as an older bookie wrote it: the raw key, no FLAG_STORED_KEY."""
    rec = records.parse(rec_bytes, 0)
    return rec._replace(flags=rec.flags & ~records.FLAG_STORED_KEY)


def refused(fn, *args) -> Status | None:
    try:
        fn(*args)
    except Rejected as e:
        return e.status
    return None


# -- the rules, one by one ------------------------------------------------------------------------

def test_the_first_record_binds_the_ledger_to_its_master_key():
    table = LedgerTable()
    assert table.apply(add_record(1, KEY)) is True
    assert table.get(1) == StoredLedger(sk(1, KEY))
    assert refused(table.check_add, 1, OTHER, False) == Status.UNAUTHORIZED
    assert refused(table.check_fence, 1, OTHER) == Status.UNAUTHORIZED
    assert refused(table.check_write_lac, 1, OTHER) == Status.UNAUTHORIZED
    assert refused(table.check_add, 1, KEY, False) is None


def test_a_record_with_another_key_changes_nothing():
    table = LedgerTable()
    table.apply(add_record(1, KEY))
    table.dirty.clear()
    assert table.apply(add_record(1, OTHER, entry_id=1)) is False
    assert table.apply(fence_record(1, OTHER)) is False
    assert table.apply(lac_record(1, 9, OTHER)) is False
    assert table.get(1) == StoredLedger(sk(1, KEY)) and not table.dirty


def test_once_fenced_a_ledger_is_never_unfenced_and_refuses_only_normal_adds():
    table = LedgerTable()
    table.apply(add_record(1, KEY))
    table.apply(fence_record(1, KEY))
    for rec in (add_record(1, KEY, 1, recovery=True), lac_record(1, 5, KEY), fence_record(1, KEY),
                add_record(1, KEY, 2)):
        table.apply(rec)
        assert table.get(1).fenced
    assert refused(table.check_add, 1, KEY, False) == Status.FENCED
    assert refused(table.check_add, 1, KEY, True) is None


def test_fencing_a_ledger_never_seen_creates_it_fenced_and_bound_to_no_key():
    # (no metadata store to name the owner: invariant 2)
    table = LedgerTable()
    assert table.check_fence(7, OTHER, owner=NO_STORE).key == b""  # no owner vouches: no key ...
    assert table.apply(fence_record(7, OTHER)) is True
    # ... and even a keyed record of it (an older bookie's) binds nothing
    assert table.get(7) == StoredLedger(b"", fenced=True) and table.dirty == {7}
    # the fence holds against every normal add, whatever its key ...
    assert refused(table.check_add, 7, KEY, False) == Status.FENCED
    assert refused(table.check_add, 7, OTHER, False) == Status.FENCED
    # ... and the fencer's key was not bound: the first recovery add binds its own
    assert table.check_add(7, KEY, True).key == sk(7, KEY)
    assert table.apply(add_record(7, KEY, recovery=True)) is True
    assert table.get(7) == StoredLedger(sk(7, KEY), fenced=True)
    assert refused(table.check_add, 7, OTHER, True) == Status.UNAUTHORIZED


def test_a_fence_or_explicit_lac_never_squats_a_ledger_id():
    table = LedgerTable()
    assert refused(table.check_write_lac, 9, OTHER) == Status.NO_LEDGER
    # a keyed record of the squatter (as an older bookie journaled it) binds nothing either
    assert table.apply(fence_record(9, OTHER)) is True  # fences, binds nothing
    # a LAC binds nothing: one met before its ledger is bound waits for the record that binds
    # it (a rebuild may read it first: invariant 8) and counts only under the key that binds
    table.apply(lac_record(9, 5, OTHER))
    table.apply(lac_record(9, 3, KEY))
    assert table.get(9).master_key == b"" and table.get(9).lac == -1
    assert table.apply(add_record(9, KEY, recovery=True)) is True
    assert table.get(9).master_key == sk(9, KEY) and table.get(9).lac == 3


def test_the_bookie_keeps_only_a_salted_one_way_form_of_the_key():
    table = LedgerTable(salt=b"instance-1")
    key = table.check_add(1, KEY, False, owner=NO_STORE).key
    assert KEY not in key and key == stored_key(b"instance-1", 1, KEY)
    assert key != stored_key(b"instance-2", 1, KEY) and key != stored_key(b"instance-1", 2, KEY)
    parts, _, _ = records.add_batch_parts(1, key, b"\x28\0\0\0", b"e" * 40, False)
    assert KEY not in b"".join(parts)
    table.apply(records.parse(b"".join(parts), 0))
    assert KEY.hex() not in str(table.get(1).as_dict())


def test_keys_of_an_older_bookie_are_derived_on_load_and_on_replay():
    old_index = {1: {"key": KEY.hex(), "fenced": False, "lac": 3}}
    table = LedgerTable(lambda lid: StoredLedger.from_dict(old_index[lid]) if lid in old_index else None)
    assert table.check_add(1, KEY, False).key == sk(1, KEY)
    assert refused(table.check_add, 1, OTHER, False) == Status.UNAUTHORIZED
    assert table.dirty == {1} and table.get(1).as_dict()["key"] == sk(1, KEY).hex()
    rec = legacy(records.add_batch_parts(2, KEY, b"\x28\0\0\0", b"e" * 40, False)[0][0]
                 + KEY + b"\x28\0\0\0" + make_entry(2, 0, b"")[:40].ljust(40, b"e"))
    assert table.apply(rec) is True and table.get(2).master_key == sk(2, KEY)


def test_the_explicit_lac_only_grows():
    table = LedgerTable()
    table.apply(add_record(1, KEY))
    table.apply(lac_record(1, 5, KEY))
    table.apply(lac_record(1, 3, KEY))
    assert table.get(1).lac == 5
    table.apply(lac_record(1, 8, KEY))
    assert table.get(1).lac == 8


@pytest.mark.parametrize("key", [b"", b"k" * 65])
def test_a_master_key_of_bad_size_is_a_bad_request(key):
    table = LedgerTable()
    for check in (lambda: table.check_add(1, key, False), lambda: table.check_fence(1, key),
                  lambda: table.check_write_lac(1, key)):
        assert refused(check) == Status.BAD_REQUEST
    assert table.get(1) is None


def test_ledgers_not_in_memory_come_from_the_loader_once():
    calls = []

    def load(ledger_id):
        calls.append(ledger_id)
        return StoredLedger(sk(3, KEY), fenced=True) if ledger_id == 3 else None

    table = LedgerTable(load)
    assert refused(table.check_add, 3, KEY, False) == Status.FENCED
    assert refused(table.check_add, 3, OTHER, True) == Status.UNAUTHORIZED
    assert table.get(4) is None
    assert calls == [3, 4]


# -- deleted ledgers ------------------------------------------------------------------------------

def test_a_deleted_ledger_refuses_every_request_with_no_ledger():
    table = LedgerTable()
    table.apply(add_record(1, KEY))
    table.mark_deleted(1)
    for check in (lambda: table.check_add(1, KEY, False), lambda: table.check_add(1, KEY, True),
                  lambda: table.check_fence(1, KEY), lambda: table.check_write_lac(1, KEY),
                  lambda: table.check_add(1, OTHER, False)):
        assert refused(check) == Status.NO_LEDGER


def test_records_of_a_deleted_ledger_change_nothing_and_store_nothing():
    table = LedgerTable(lambda lid: StoredLedger.tombstone() if lid == 2 else None)
    for rec in (add_record(2, KEY), fence_record(2, KEY), lac_record(2, 4, KEY)):
        assert table.apply(rec) is False
    assert table.get(2).deleted and not table.dirty


def test_marking_a_ledger_deleted_drops_its_unpersisted_changes():
    table = LedgerTable()
    table.apply(add_record(3, KEY))
    assert table.dirty == {3}
    table.mark_deleted(3)
    assert table.dirty == set() and table.get(3).deleted


# -- live path vs replay --------------------------------------------------------------------------

LEDGERS = st.integers(0, 3)
KEYS = st.sampled_from([KEY, OTHER, b"third"])
request = st.one_of(
    st.tuples(st.just("add"), LEDGERS, KEYS, st.booleans()),
    st.tuples(st.just("fence"), LEDGERS, KEYS),
    st.tuples(st.just("write_lac"), LEDGERS, KEYS, st.integers(-1, 20)),
)
# Between placing a record and committing it, the GC may delete one ledger the index holds.
step = st.tuples(request, st.one_of(st.none(), LEDGERS))


class Index:
    """The index's two ledger tables as the model sees them: live records and tombstones."""

    def __init__(self, ledgers=None, deleted=()):
        self.ledgers: dict[int, dict] = dict(ledgers or {})
        self.deleted: set[int] = set(deleted)

    def copy(self) -> "Index":
        return Index(self.ledgers, self.deleted)

    def load(self, ledger_id: int) -> StoredLedger | None:
        if ledger_id in self.deleted:
            return StoredLedger.tombstone()
        raw = self.ledgers.get(ledger_id)
        return None if raw is None else StoredLedger.from_dict(raw)

    def gc_delete(self, ledger_id: int) -> None:
        self.ledgers.pop(ledger_id, None)
        self.deleted.add(ledger_id)

    def commit(self, table: LedgerTable, touched: set[int]) -> None:
        """What LedgerStorage.commit does: nothing for tombstoned ledgers, which become deleted."""
        gone = {lid for lid in touched | table.dirty if lid in self.deleted}
        for lid in table.dirty - gone:
            self.ledgers[lid] = table.ledgers[lid].as_dict()
        table.dirty.clear()
        for lid in gone:
            table.mark_deleted(lid)


def live_path(steps):
    """Drive the table as the add worker does: check, place (the journal list), apply, commit.

    Returns (journal records, index state after each record's commit, ledgers deleted after it).
    """
    index = Index()
    table = LedgerTable(index.load)
    journal: list[records.Record] = []
    states = [index.copy()]
    deletions: list[set[int]] = [set()]  # deletions[i]: GC deletions after state i
    for n, (req, gc_victim) in enumerate(steps):
        op, ledger_id, key = req[:3]
        try:
            if op == "add":
                stored = table.check_add(ledger_id, key, req[3], owner=NO_STORE).key
                rec = add_record(ledger_id, key, n, req[3])
            elif op == "fence":
                stored = table.check_fence(ledger_id, key, owner=NO_STORE).key
                rec = fence_record(ledger_id, key if stored else b"")
            else:
                stored = table.check_write_lac(ledger_id, key).key
                rec = lac_record(ledger_id, req[3], key)
            assert rec.master_key == stored
        except Rejected as e:
            if e.status == Status.NO_LEDGER and op != "write_lac":
                assert index.load(ledger_id).deleted
            continue
        journal.append(rec)
        table.apply(rec)
        if gc_victim is not None and gc_victim in index.ledgers:
            index.gc_delete(gc_victim)
            for later in deletions:
                later.add(gc_victim)
        index.commit(table, {rec.ledger_id})
        states.append(index.copy())
        deletions.append(set())
    return journal, states, deletions


@settings(max_examples=400, deadline=None)
@given(steps=st.lists(step, max_size=40), data=st.data())
def test_replay_from_any_last_log_mark_rebuilds_the_live_table(steps, data):
    journal, states, deletions = live_path(steps)
    # LastLogMark m: records before it are in the synced index.  The index may hold more (commits
    # after the last checkpoint): any state committed at k >= m.
    m = data.draw(st.integers(0, len(journal)), label="mark")
    k = data.draw(st.integers(m, len(journal)), label="index state")
    index = states[k].copy()
    replayed = LedgerTable(index.load)
    for rec in journal[m:]:
        replayed.apply(rec)
        index.commit(replayed, {rec.ledger_id})
    for lid in deletions[k]:  # the GC deletes again what it deleted after the index state
        index.gc_delete(lid)
    assert (index.ledgers, index.deleted) == (states[-1].ledgers, states[-1].deleted)
    for lid in range(4):
        want = states[-1].load(lid)
        got = replayed.get(lid)
        assert got == want or (lid in deletions[k] and want.deleted)
