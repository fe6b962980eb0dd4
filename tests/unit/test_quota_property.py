"""Storage quotas per writer identity (core/quotas.py, core/adds.py invariant 8) as properties:
over any sequence of adds (normal and recovery, enrolled and not), deletes, over-replicated
drops, quota passes (resets from what the bookie holds) and restarts (identities reloaded from
their store, usage from the index), usage is what the bookie holds per identity, and only an
add past its identity's quota that is not exempt (the recovery principal's, a recovery add to a
fenced ledger) is refused: RECOVERY_ADD alone exempts nothing, and binds the ledger's identity."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.core.adds import AddMachine
from bookie.core.ledgers import LedgerTable, Rejected
from bookie.core.quotas import Quotas, ledger_identity
from bookie.wire import Status

LIMIT = 1000
KEYS = ["keyA", "keyB", None]  # two enrolled keys; None: no enrolment (the ledger's owner)

ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 6), st.sampled_from(KEYS), st.integers(1, 400),
              st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("delete"), st.integers(1, 6)),
    st.tuples(st.just("drop"), st.integers(1, 6)),
    st.tuples(st.just("pass")),
    st.tuples(st.just("restart")),
), max_size=60)


class Bookie:
    """The truth: what the bookie holds (the index's ledger maps and deleted table) and the
    identity store, driven through the add machine as the add worker drives it."""

    def __init__(self):
        self.held: dict[int, int] = {}
        self.deleted: set[int] = set()
        self.saved: dict[int, str] = {}
        self.start()

    def start(self):
        self.machine = AddMachine(LedgerTable(), 1, 100, 1 << 20)
        self.machine.quotas = Quotas(LIMIT)
        self.machine.quotas.identities = dict(self.saved)
        self.quota_pass()

    def quota_pass(self):
        q = self.machine.quotas
        self.saved.update(q.unsaved)
        q.unsaved = {}
        q.reset({lid: n for lid, n in self.held.items() if lid not in self.deleted})
        for lid in q.forgotten(self.deleted & q.identities.keys()):
            del self.saved[lid]

    def identity(self, lid):
        key = self.machine.quotas.identities.get(lid)
        return ("key", key) if key is not None else ledger_identity(lid)


def derived_usage(q: Quotas) -> dict:
    out: dict = {}
    for lid, n in q.ledger_bytes.items():
        i = q.identity_of(lid)
        out[i] = out.get(i, 0) + n
    return {i: n for i, n in out.items() if n}


@settings(max_examples=300, deadline=None)
@given(ops)
def test_usage_is_what_the_bookie_holds_per_identity(steps):
    b = Bookie()
    for step in steps:
        q = b.machine.quotas
        kind = step[0]
        if kind == "add":
            _, lid, key, n, recovery, admin, fenced = step
            if lid in b.deleted:
                continue  # NO_LEDGER, before any quota (core/ledgers.py invariant 6)
            fenced = fenced and recovery  # a normal add to a fenced ledger is refused FENCED
            key_now = q.identities.get(lid, None if admin else key)
            ident = ("key", key_now) if key_now is not None else ledger_identity(lid)
            exempt = admin or (recovery and fenced)
            before = dict(q.usage)
            try:
                b.machine.check_quota(lid, recovery, admin, key, n, fenced=fenced)
            except Rejected as e:
                assert e.status == Status.OVER_QUOTA
                assert not exempt, "the recovery principal, or a recovery add to a fenced ledger"
                assert before.get(ident, 0) + n > LIMIT
                assert q.usage == before, "a refused add changes nothing"
                continue
            assert exempt or before.get(ident, 0) + n <= LIMIT, "RECOVERY_ADD alone exempts nothing"
            bound = q.identities.get(lid)
            b.machine.placed(lid, key, n, admin)
            # the first add of any kind from a writer key binds; the recovery principal never
            want = bound if bound is not None else (None if admin else key)
            assert q.identities.get(lid) == want
            b.held[lid] = b.held.get(lid, 0) + n
            # other identities are unaffected
            for i, v in before.items():
                if i != ident and i != ledger_identity(lid):
                    assert q.usage.get(i, 0) == v
        elif kind == "delete":
            b.deleted.add(step[1])
        elif kind == "drop":
            if step[1] in b.held:
                b.held[step[1]] = 0
        elif kind == "pass":
            b.quota_pass()
        else:
            b.quota_pass()  # what the last commit persisted
            b.start()
        q = b.machine.quotas
        assert q.usage == derived_usage(q)  # invariant 1, at every step
        if kind in ("pass", "restart"):
            truth: dict = {}
            for lid, n in b.held.items():
                if lid not in b.deleted and n:
                    i = b.identity(lid)
                    truth[i] = truth.get(i, 0) + n
            assert q.usage == truth
            at = {i for i, v in truth.items() if v >= LIMIT}
            assert q.over() == len(at | q.refused.keys())
            assert all(truth.get(i, 0) >= u for i, u in q.refused.items())


def test_a_deleted_ledgers_bytes_come_back_to_its_writer():
    b = Bookie()
    b.machine.check_quota(1, False, False, "keyA", 900)
    b.machine.placed(1, "keyA", 900, False)
    b.held[1] = 900
    try:
        b.machine.check_quota(2, False, False, "keyA", 200)
        raise AssertionError("over quota, not refused")
    except Rejected as e:
        assert e.status == Status.OVER_QUOTA
    b.machine.check_quota(3, False, False, "keyB", 200)  # another writer keeps writing
    try:  # RECOVERY_ADD alone exempts nothing (issue 39 item 2)
        b.machine.check_quota(2, True, False, "keyA", 200)
        raise AssertionError("a writer's RECOVERY_ADD past its quota was not refused")
    except Rejected as e:
        assert e.status == Status.OVER_QUOTA
    b.machine.check_quota(2, True, False, "keyA", 200, fenced=True)  # a recovering reader's
    b.machine.check_quota(2, True, True, "keyA", 200)  # the recovery principal's
    b.deleted.add(1)
    b.quota_pass()
    b.machine.check_quota(2, False, False, "keyA", 200)
    assert b.saved == {}


def test_no_quota_keeps_nothing():
    m = AddMachine(LedgerTable(), 1, 100, 1 << 20)
    for lid in range(100):
        m.check_quota(lid, False, False, "k", 1 << 40)
        m.placed(lid, "k", 1 << 40, False)
    assert m.quotas.usage == {} and m.quotas.ledger_bytes == {} and m.quotas.over() == 0


def test_the_quota_key_is_a_non_negative_byte_count_default_off(tmp_path):
    import pytest

    from bookie.workers.config import BookieConfig, ConfigError

    base = {"journalDirectory": str(tmp_path), "ledgerDirectories": str(tmp_path)}
    assert BookieConfig.from_mapping(base).ledger_storage_quota_bytes == 0
    assert BookieConfig.from_mapping(
        dict(base, ledgerStorageQuotaBytes="1048576")).ledger_storage_quota_bytes == 1 << 20
    for bad in ("-1", "abc"):
        with pytest.raises(ConfigError, match="ledgerStorageQuotaBytes"):
            BookieConfig.from_mapping(dict(base, ledgerStorageQuotaBytes=bad))
