"""Invariant 8 of bookie.core.ledgers, on the rule book alone: the records the live path lets
through, applied in any order (a rebuild reads the entry logs in id order, and compaction puts a
ledger's restated fence and copied entries in a log newer than what was written after them),
yield the table the live path built.

Pure logic: the table, records as the live path places them, and a fast stand-in for the slow
owner check.  tests/unit/test_ownership_property.py drives the same rules over real storage."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from bookie.core.ledgers import FENCE, LAC, ADD_BATCH, LedgerTable, Owner, Rejected
from bookie.metadata.recovery_secret import credential
from bookie.storage.records import Record

SECRET = bytes(range(32))
OWNER_KEY = b"owner"
KEYS = [OWNER_KEY, b"stranger"]
OWNERS = {0: b"check:" + OWNER_KEY, 1: Owner.NO_CHECK, 2: Owner.UNKNOWN}


def _verify(check: bytes, master_key: bytes) -> bool:
    return check == b"check:" + master_key


LEDGERS = st.sampled_from(sorted(OWNERS))
op = st.one_of(
    st.tuples(st.just("add"), LEDGERS, st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("cred_add"), LEDGERS),
    st.tuples(st.just("fence"), LEDGERS, st.sampled_from(KEYS)),
    st.tuples(st.just("cred_fence"), LEDGERS),
    st.tuples(st.just("write_lac"), LEDGERS, st.sampled_from(KEYS), st.integers(-1, 5)),
    st.tuples(st.just("delete"), LEDGERS),
)


def _table() -> LedgerTable:
    return LedgerTable(salt=b"salt", recovery_secret=SECRET, verify=_verify)


def _live(ops) -> tuple[LedgerTable, list[Record], set[int]]:
    """Run ``ops`` as the add worker would; returns the table, the records it stored, and the
    ids the GC deleted."""
    table = _table()
    stored: list[Record] = []
    deleted: set[int] = set()

    def owner(lid):
        return OWNERS[lid] if table.needs_owner(lid) else None

    for o in ops:
        kind, lid = o[0], o[1]
        lac = -1
        try:
            if kind == "add":
                rtype, placed = ADD_BATCH, table.check_add(lid, o[2], o[3], False, owner(lid))
            elif kind == "cred_add":
                rtype, placed = ADD_BATCH, table.check_add(lid, credential(SECRET, lid), True, True,
                                                           owner(lid))
            elif kind == "fence":
                rtype, placed = FENCE, table.check_fence(lid, o[2], False, owner(lid))
            elif kind == "cred_fence":
                rtype, placed = FENCE, table.check_fence(lid, credential(SECRET, lid), True, owner(lid))
            elif kind == "write_lac":
                rtype, placed, lac = LAC, table.check_write_lac(lid, o[2]), o[3]
            else:
                if table.get(lid) is not None:
                    table.mark_deleted(lid)
                    deleted.add(lid)
                continue
        except Rejected:
            continue
        rec = Record(rtype, placed.flags, lid, placed.key, lac, None, 0, 0)
        if table.apply(rec):
            stored.append(rec)
    return table, stored, deleted


def _state(table: LedgerTable) -> dict:
    return {lid: ("deleted" if info.deleted else info.as_dict())
            for lid, info in table.ledgers.items()}


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=25), data=st.data())
# a LAC written after a fence, read back before the fence that compaction restated in a newer log
@example(ops=[("fence", 0, OWNER_KEY), ("write_lac", 0, OWNER_KEY, 0)], data=None)
@example(ops=[("add", 1, OWNER_KEY, False), ("write_lac", 1, OWNER_KEY, 3)], data=None)
def test_the_stored_records_in_any_order_rebuild_the_live_table(ops, data):
    live, stored, deleted = _live(ops)
    order = list(reversed(stored)) if data is None else data.draw(st.permutations(stored))
    rebuilt = _table()
    for lid in deleted:
        rebuilt.mark_deleted(lid)  # as a rebuild does: the durable deletes first
    for rec in order:
        rebuilt.apply(rec)
    assert _state(rebuilt) == _state(live)
    for rec in order:  # idempotent: the journal's copies, applied after the logs, change nothing
        rebuilt.apply(rec)
    assert _state(rebuilt) == _state(live)
