"""The cluster recovery credential in the bookie's ledger table (bookie.core.ledgers invariant 3)
and on the wire: it acts for the ledger's key on recovery adds and fences only, its copies belong
to the owner the metadata names (and bind nothing where no owner is named), and the live path and
a journal replay from any LastLogMark store the same entries."""

import pytest
from hypothesis import given, settings, strategies as st

from bookie import wire
from bookie.metadata.recovery_secret import credential
from bookie.testing.rawclient import make_entry
from bookie.wire import Flag, Op, Status
from bookie.storage import records
from bookie.core.ledgers import LedgerTable, Owner, Rejected, StoredLedger, stored_key
from bookie.metadata.ledger import make_key_check

SECRET = bytes(range(32))
KEY = b"the-writers-key"


def add_record(ledger_id, stored, entry_id=0, recovery=False, flags=None):
    entry = make_entry(ledger_id, entry_id, b"payload")
    parts, _, _ = records.add_batch_parts(ledger_id, stored, len(entry).to_bytes(4, "little"),
                                          entry, recovery, flags=flags)
    return records.parse(b"".join(parts), 0)


def placed_record(ledger_id, placed, entry_id=0):
    return add_record(ledger_id, placed.key, entry_id, flags=placed.flags)


def refused(fn, *args):
    try:
        fn(*args)
    except Rejected as e:
        return e.status
    return None


def test_the_credential_is_per_ledger_and_per_secret():
    assert credential(SECRET, 1) != credential(SECRET, 2)
    assert credential(SECRET, 1) != credential(bytes(32), 1)
    assert len(credential(SECRET, 1)) == 32


def test_on_a_bound_ledger_it_acts_as_the_writers_key():
    table = LedgerTable(recovery_secret=SECRET)
    table.apply(add_record(1, stored_key(b"", 1, KEY)))
    bound = table.get(1).master_key
    assert table.check_add(1, credential(SECRET, 1), True, True).key == bound
    assert table.check_fence(1, credential(SECRET, 1), True).key == bound
    table.apply(records.parse(records.fence_record(1, bound), 0))
    assert table.get(1).fenced and table.get(1).master_key == bound
    assert table.apply(add_record(1, bound, 1, recovery=True)) is True


def test_on_a_ledger_whose_metadata_names_no_key_it_binds_nothing():
    table = LedgerTable(recovery_secret=SECRET)
    assert table.check_add(2, credential(SECRET, 2), True, True, Owner.NO_CHECK).key == b""
    assert table.apply(add_record(2, b"", 0, recovery=True)) is True  # the copy is stored
    assert table.get(2) == StoredLedger(b"")  # unbound, not fenced
    assert table.check_fence(3, credential(SECRET, 3), True, Owner.NO_STORE).key == b""  # an unbound fence
    # the first add with a real key binds as before
    assert refused(table.check_add, 2, KEY, False) is None
    table.apply(add_record(2, stored_key(b"", 2, KEY), 1))
    assert table.get(2).master_key == stored_key(b"", 2, KEY)


def test_copies_on_the_credential_belong_to_the_owner_the_metadata_names():
    table = LedgerTable(recovery_secret=SECRET)
    check = make_key_check(KEY)
    placed = table.check_add(4, credential(SECRET, 4), True, True, check)
    assert placed.key == check and placed.flags & records.FLAG_OWNER_CHECK
    assert table.apply(placed_record(4, placed)) is True
    assert table.get(4) == StoredLedger(b"", owner_check=check)
    # a stranger's first add does not take the healed copies: its key is not the owner's
    assert refused(table.check_add, 4, b"stranger", False) == Status.UNAUTHORIZED
    assert refused(table.check_fence, 4, b"stranger") == Status.UNAUTHORIZED
    # the owner's key passes, and its first record binds the ledger for good
    owner = table.check_add(4, KEY, False)
    table.apply(placed_record(4, owner, 1))
    assert table.get(4) == StoredLedger(stored_key(b"", 4, KEY))


@pytest.mark.parametrize("secret, cred", [
    (SECRET, credential(SECRET, 5)),  # another ledger's credential
    (SECRET, credential(bytes(32), 4)),  # another cluster's
    (None, credential(SECRET, 4)),  # a bookie without a metadata store: no secret
    (SECRET, b"x"),
])
def test_a_wrong_credential_or_none_known_is_unauthorized(secret, cred):
    table = LedgerTable(recovery_secret=secret)
    table.apply(add_record(4, stored_key(b"", 4, KEY)))
    assert refused(table.check_add, 4, cred, True, True) == Status.UNAUTHORIZED
    assert refused(table.check_fence, 4, cred, True) == Status.UNAUTHORIZED
    assert refused(table.check_fence, 9, cred, True) == Status.UNAUTHORIZED


def test_never_on_a_normal_add_and_a_deleted_ledger_stays_deleted():
    table = LedgerTable(recovery_secret=SECRET)
    assert refused(table.check_add, 6, credential(SECRET, 6), False, True) == Status.BAD_REQUEST
    table.mark_deleted(7)
    assert refused(table.check_add, 7, credential(SECRET, 7), True, True) == Status.NO_LEDGER
    assert refused(table.check_fence, 7, credential(SECRET, 7), True) == Status.NO_LEDGER


@pytest.mark.parametrize("op, flags", [
    (Op.ADD, Flag.RECOVERY_CREDENTIAL),  # a normal add
    (Op.WRITE_LAC, Flag.RECOVERY_CREDENTIAL),
    (Op.READ, Flag.RECOVERY_CREDENTIAL),  # a read without FENCE
    (Op.READ_LAC, Flag.RECOVERY_CREDENTIAL | Flag.LONG_POLL),
    (Op.INFO, Flag.RECOVERY_CREDENTIAL),
])
def test_the_wire_flag_only_beside_a_recovery_add_or_a_fence(op, flags):
    with pytest.raises(wire.ProtocolError):
        wire.check_request_flags(op, int(flags))


@pytest.mark.parametrize("op, flags", [
    (Op.ADD, Flag.RECOVERY_ADD), (Op.READ, Flag.FENCE), (Op.READ_LAC, Flag.FENCE)])
def test_the_wire_flag_passes_where_it_belongs(op, flags):
    wire.check_request_flags(op, int(flags | Flag.RECOVERY_CREDENTIAL))


# -- live path vs replay, with credential copies among the writer's requests ----------------------

LEDGERS = st.integers(0, 2)
# what the metadata store says of each ledger: no store, a ledger naming no key, one naming KEY
OWNERS = {0: Owner.NO_STORE, 1: Owner.NO_CHECK, 2: make_key_check(KEY)}
request = st.one_of(
    st.tuples(st.just("add"), LEDGERS, st.sampled_from([KEY, b"other"]), st.booleans()),
    st.tuples(st.just("fence"), LEDGERS, st.sampled_from([KEY, b"other"])),
    st.tuples(st.just("cred_add"), LEDGERS),
    st.tuples(st.just("cred_fence"), LEDGERS),
)


def live(steps):
    index: dict[int, dict] = {}
    table = LedgerTable(lambda lid: StoredLedger.from_dict(index[lid]) if lid in index else None,
                        recovery_secret=SECRET)
    journal, stored, states = [], [], [dict(index)]
    for n, req in enumerate(steps):
        op, lid = req[:2]
        try:
            owner = OWNERS[lid]
            if op == "add":
                rec = placed_record(lid, table.check_add(lid, req[2], req[3], owner=owner), n)
            elif op == "fence":
                p = table.check_fence(lid, req[2], owner=owner)
                rec = records.parse(records.fence_record(lid, p.key, p.flags), 0)
            elif op == "cred_add":
                rec = placed_record(lid, table.check_add(lid, credential(SECRET, lid), True, True, owner), n)
            else:
                p = table.check_fence(lid, credential(SECRET, lid), True, owner)
                rec = records.parse(records.fence_record(lid, p.key, p.flags), 0)
        except Rejected:
            continue
        journal.append(rec)
        stored.append(table.apply(rec))
        for lid2 in table.dirty:
            index[lid2] = table.ledgers[lid2].as_dict()
        table.dirty.clear()
        states.append(dict(index))
    return journal, stored, states


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(request, max_size=30), data=st.data())
def test_replay_stores_every_entry_the_live_path_stored(steps, data):
    journal, stored, states = live(steps)
    m = data.draw(st.integers(0, len(journal)), label="mark")
    k = data.draw(st.integers(m, len(journal)), label="index state")
    index = dict(states[k])
    replayed = LedgerTable(lambda lid: StoredLedger.from_dict(index[lid]) if lid in index else None)
    for rec, live_stored in zip(journal[m:], stored[m:]):
        assert replayed.apply(rec) == live_stored, rec
        for lid in replayed.dirty:
            index[lid] = replayed.ledgers[lid].as_dict()
        replayed.dirty.clear()
    assert index == states[-1]
