"""One owner per ledger id, write-once entries, and state that survives every on-disk form.

The seven defects of the last review, each driven through real bookie processes (the client, the
wire, the ``bookie shell`` CLI): a bookie asks the metadata store who owns an id before it stores
or fences anything under it, a binding never moves, copies on the recovery credential belong to
the owner, an entry's bytes never change, and a fence survives journal rolls, compaction and an
index rebuild (``bookie.core.ledgers``).
"""

import os
import shutil
import subprocess
import sys
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.digest import master_key
from bookie.client.errors import LedgerFencedError
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import make_key_check
from bookie.metadata.recovery_secret import credential, recovery_secret as read_secret
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Flag, Op, Status
from bookie.workers import claims
from bookie.workers.claims import OwnerLookup, OwnerResolver
from bookie.core.ledgers import LedgerTable, Owner, Rejected

CONF = {"gcWaitTime": 600_000, "flushInterval": 50, "entryLogFilePreallocationEnabled": "false",
        "minorCompactionInterval": 0, "majorCompactionInterval": 0}
PASSWORD = b"the-real-writer"
KEY = master_key(PASSWORD)
STRANGER = b"not-the-writer"


def _create(bk, e=1):
    return bk.create_ledger(ensemble_size=e, write_quorum=e, ack_quorum=e, digest="crc32c",
                            password=PASSWORD)


def _written(bk, payloads):
    """A closed ledger of the writer (E=1) holding ``payloads``; returns its id."""
    lh = _create(bk)
    for p in payloads:
        lh.add_entry(p, timeout_s=5)
    lh.close()
    return lh.ledger_id


def _credential_add(raw, lid, cred, entries):
    """A recovery add on the recovery credential, as autorecovery's copier sends it."""
    status, _ = raw.request(raw.add_sock, Op.ADD, lid, Flag.RECOVERY_ADD | Flag.RECOVERY_CREDENTIAL,
                            [cred, *_batch(entries)])
    return status


def _read_back(bk, lid):
    rh = bk.open_ledger(lid, digest="crc32c", password=PASSWORD, recovery=False)
    try:
        last = rh.last_add_confirmed
        return [e.data for e in rh.read_entries(0, last)] if last >= 0 else []
    finally:
        rh.close()


def _shell(ens, i, *args, timeout=300):
    cmd = [sys.executable, "-m", "bookie", "shell", *args]
    for k, v in ens.overrides(i).items():
        cmd += ["--set", f"{k}={v}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _rebuild_index(ens, i=0):
    ens.stop(i)
    shutil.rmtree(os.path.join(ens.bookie_dir(i), "ledgers", "current", "index"))
    proc = _shell(ens, i, "rebuild-index")
    assert proc.returncode == 0, proc.stderr
    ens.start(i)


def _crc32c_entries(bk, lid, payloads):
    """Entries as a writer of ledger ``lid`` would format them (valid crc32c digests)."""
    from bookie.client.digest import DigestManager
    enc = DigestManager(lid, "crc32c", PASSWORD)
    out, length = [], 0
    for i, p in enumerate(payloads):
        length += len(p)
        out.append(bytes(enc.encode(i, i - 1, length, p)))
    return out


@pytest.fixture(scope="module")
def one():
    with LocalBookies(1, conf=CONF) as ens:
        yield ens


# -- 1 and 7: nothing is stored under an id the store does not know ------------------------------

def test_a_stranger_gets_no_ledger_for_the_next_id_and_the_writer_keeps_its_entries_through_a_rebuild():
    with LocalBookies(1, conf=CONF) as ens, open_metadata(ens.metadata_uri) as store, \
            BookKeeper(ens.metadata_uri) as bk, RawBookieClient(ens.bookies[0]) as raw:
        nxt = store.ledger_id_high_water() + 1
        forged = _crc32c_entries(bk, nxt, [b"stranger %d" % i for i in range(3)])
        for e in forged:  # valid digests, but nobody created the ledger yet
            assert raw.add(nxt, [e], STRANGER) == Status.NO_LEDGER
            assert raw.add(nxt, [e], KEY) == Status.NO_LEDGER
        assert raw.fence(nxt, STRANGER) == Status.NO_LEDGER
        lh = _create(bk)
        assert lh.ledger_id == nxt
        for i in range(3):
            lh.add_entry(b"writer %d" % i, timeout_s=5)
        lh.close()
        raw.close()
        _rebuild_index(ens)
        assert _read_back(bk, nxt) == [b"writer %d" % i for i in range(3)]


def test_no_client_stores_anything_under_an_id_nobody_created(one):
    ens = one
    lid = 7_000_000_000
    before = _ledger_dir_bytes(ens)
    with RawBookieClient(ens.bookies[0]) as raw:
        big = b"x" * (1 << 20)
        for e in range(64):
            assert raw.add(lid, [make_entry(lid, e, big)], STRANGER) == Status.NO_LEDGER
        assert raw.read(lid, 0)[0] in (Status.NO_LEDGER, Status.NO_ENTRY)
        assert raw.write_lac(lid, 5, STRANGER) == Status.NO_LEDGER
    assert _ledger_dir_bytes(ens) - before < (1 << 20)  # not 64 MiB


def _ledger_dir_bytes(ens, i=0):
    total = 0
    for dirpath, _, files in os.walk(os.path.join(ens.bookie_dir(i), "ledgers")):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


# -- 2: a fence survives a rolled journal, compaction and a rebuilt index -------------------------

def test_a_recovered_ledger_stays_fenced_after_journal_roll_compaction_and_rebuild(tmp_path):
    conf = dict(CONF, journalMaxSizeMB=1, journalMaxBackups=0, logSizeLimit=65536,
                majorCompactionThreshold=0.9)
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens, \
            BookKeeper(ens.metadata_uri) as writer, BookKeeper(ens.metadata_uri) as other:
        lh = _create(writer)
        doomed = _create(writer)  # shares the entry log, then deleted: the log's live share drops
        for i in range(5):
            lh.add_entry(b"entry %d" % i, timeout_s=5)
        for i in range(40):
            doomed.add_entry(os.urandom(1000), timeout_s=5)
        doomed.close()
        # another client recovers the ledger: fenced on the bookie, closed at 4
        rh = other.open_ledger(lh.ledger_id, digest="crc32c", password=PASSWORD)
        assert rh.last_add_confirmed == 4
        rh.close()
        other.delete_ledger(doomed.ledger_id)
        # roll the journal past the fence (1 MiB files, no backups) and the fence's entry log
        filler = _create(writer)
        for _ in range(3):
            for fut in [filler.add_entry_async(os.urandom(4000)) for _ in range(300)]:
                fut.result(30)
        filler.close()
        journal = os.path.join(ens.bookie_dir(0), "journal", "current")
        first_journal = min(os.listdir(journal))
        start = len(ens.log(0))
        proc = _shell(ens, 0, "triggergc", "--major", timeout=60)
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 60
        while "compaction done" not in ens.log(0)[start:] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "compaction done" in ens.log(0)[start:], ens.log(0)[start:][-2000:]
        deadline = time.monotonic() + 60  # rolled away at a checkpoint after the roll
        while first_journal in os.listdir(journal) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first_journal not in os.listdir(journal)  # the fence's journal file rolled away
        _rebuild_index(ens)
        with pytest.raises(LedgerFencedError):
            lh.add_entry(b"entry 5 from the old writer", timeout_s=5)
        assert _read_back(other, lh.ledger_id) == [b"entry %d" % i for i in range(5)]


# -- 3: copies on the recovery credential belong to the owner -------------------------------------

def test_healed_copies_are_the_owners_and_a_strangers_first_add_is_refused(one):
    ens = one
    with open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        secret = read_secret(store, create=False)
        # a ledger written elsewhere; this bookie is its replacement and holds nothing of it
        lid = store.create_ledger(LedgerMetadata(
            1, 1, 1, key_check=make_key_check(KEY), fragments=[(0, ["127.0.0.1:9"])]))[0]
        healed = _crc32c_entries(bk, lid, [b"healed %d" % i for i in range(3)])
        cred = credential(secret, lid)
        for e in healed:  # as autorecovery's copier sends them
            assert _credential_add(raw, lid, cred, [e]) == Status.OK
        # a stranger's first ADD (no credential) does not bind the ledger nor replace the copies
        for i, e in enumerate(_crc32c_entries(bk, lid, [b"stranger %d" % i for i in range(3)])):
            assert raw.add(lid, [e], STRANGER) == Status.UNAUTHORIZED
        assert raw.fence(lid, STRANGER) == Status.UNAUTHORIZED
        assert raw.read(lid, 0, 3) == (Status.OK, healed)
        # the owner's key passes (and binds the ledger here)
        assert raw.fence(lid, KEY) == Status.OK
        assert raw.read(lid, 0, 3) == (Status.OK, healed)


def _batch(entries):
    from bookie import wire
    return list(wire.pack_batch(entries))


# -- 4: a binding never moves because the metadata changed ----------------------------------------

def test_rewriting_the_metadata_key_check_does_not_hand_a_ledger_to_another_key(one):
    ens = one
    with open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        lid = _written(bk, [b"real %d" % i for i in range(3)])
        meta, version = store.read_ledger(lid)
        forged = LedgerMetadata(**{**meta.__dict__, "key_check": make_key_check(STRANGER)})
        store.write_ledger(lid, forged, version)  # whoever may write metadata names their key
        try:
            for i in range(3, 6):
                assert raw.add(lid, [make_entry(lid, i, b"theirs")], STRANGER) == Status.UNAUTHORIZED
            assert raw.add(lid, [make_entry(lid, 0, b"theirs")], STRANGER) == Status.UNAUTHORIZED
            assert raw.fence(lid, STRANGER) == Status.UNAUTHORIZED
        finally:
            meta2, v2 = store.read_ledger(lid)
            store.write_ledger(lid, meta, v2)
        assert _read_back(bk, lid) == [b"real %d" % i for i in range(3)]
        assert "reclaimed" not in ens.log(0)


# -- 5: fences of ids nobody created squat nothing ------------------------------------------------

def test_fences_of_the_next_ids_by_made_up_keys_do_not_stop_new_ledgers(one):
    ens = one
    with open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        first = store.ledger_id_high_water() + 1
        for lid in range(first, first + 4):
            assert raw.fence(lid, b"made-up-1") == Status.NO_LEDGER
            assert raw.fence(lid, b"made-up-2") == Status.NO_LEDGER
        for _ in range(4):
            lh = _create(bk)
            assert first <= lh.ledger_id < first + 4
            assert lh.add_entry(b"mine", timeout_s=5) == 0
            lh.close()


# -- 6: entries are write-once --------------------------------------------------------------------

def test_an_entry_held_is_never_rewritten_and_an_identical_resend_is_answered_ok(one):
    ens = one
    with open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        lid = _written(bk, [b"acknowledged %d" % i for i in range(4)])
        status, held = raw.read(lid, 0, 4)
        assert status == Status.OK
        forged = _crc32c_entries(bk, lid, [b"rewritten %d" % i for i in range(4)])
        # the ledger's own key, a normal and a recovery add: refused, nothing changes
        assert raw.add(lid, [forged[2]], KEY) == Status.ENTRY_EXISTS
        assert raw.add(lid, [forged[2]], KEY, recovery=True) == Status.ENTRY_EXISTS
        cred = credential(read_secret(store, create=False), lid)
        assert _credential_add(raw, lid, cred, [forged[1]]) == Status.ENTRY_EXISTS
        # the bytes first sent, sent again (a client's resend): OK, nothing stored twice
        assert raw.add(lid, [held[2]], KEY, recovery=True) == Status.OK
        assert raw.add(lid, held[1:3], KEY, recovery=True) == Status.OK
        # a batch mixing a held entry with a new one stores only the new one
        assert raw.add(lid, [held[3], make_entry(lid, 4, b"new")], KEY, recovery=True) == Status.OK
        assert raw.read(lid, 0, 4) == (Status.OK, held)
        assert raw.read(lid, 4, 1) == (Status.OK, [make_entry(lid, 4, b"new")])
        ens.kill(0)  # and after a replay of the journal
        ens.start(0)
    with RawBookieClient(ens.bookies[0]) as raw:
        assert raw.read(lid, 0, 4) == (Status.OK, held)


def test_an_entry_held_before_a_restart_is_not_rewritten_once_the_journal_replayed_a_lower_one(tmp_path):
    """Write-once across a replay (found by tests/unit/test_ownership_property.py): a bookie
    remembers each ledger's highest stored entry id, to skip the held-entry lookup of ids above
    it; after a restart that memory started from the first entry the journal's replay stored.
    Entry 5 checkpointed, entry 0 only in the journal, a SIGKILL: the replay of entry 0 made the
    highest id 0, and entry 5 was then taken again with other bytes (answered OK, read back
    changed)."""
    lid = 4242
    conf = {**CONF, "flushInterval": 600_000}  # no checkpoint but the clean stop's
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        create_ledgers(ens.metadata_uri, [lid], KEY)
        first = make_entry(lid, 5, b"acknowledged first")
        with RawBookieClient(ens.bookies[0]) as raw:
            assert raw.add(lid, [first], KEY) == Status.OK
        assert ens.stop(0) == 0  # its final checkpoint: entry 5 before the mark
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as raw:
            assert raw.add(lid, [make_entry(lid, 0, b"zero")], KEY) == Status.OK
        ens.kill(0)  # entry 0 only in the journal: the start replays it
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as raw:
            assert raw.add(lid, [make_entry(lid, 5, b"other bytes")], KEY) == Status.ENTRY_EXISTS
            assert raw.read(lid, 5, 1) == (Status.OK, [first])


# -- the lookup's budget, against a real embedded store -------------------------------------------

def test_the_owner_lookup_reads_each_ledger_once_and_within_its_budget(tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    with open_metadata(uri, create=True) as store:
        ids = [store.create_ledger(LedgerMetadata(1, 1, 1, key_check=make_key_check(KEY),
                                                  fragments=[(0, ["b:1"])]))[0] for _ in range(3)]
        old, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, ["b:1"])]))
    now = [0.0]
    lookup = OwnerLookup(uri, clock=lambda: now[0])
    try:
        for _ in range(50):  # a check is kept: one read per ledger, however often asked
            assert all(isinstance(lookup.owner(lid), bytes) for lid in ids)
            assert lookup.owner(old) is Owner.NO_CHECK
        assert lookup.lookups_total == 4
        for lid in range(10**9, 10**9 + 2 * claims.LOOKUPS_PER_S):  # ids nobody created
            assert lookup.owner(lid) in (Owner.UNKNOWN, Owner.UNAVAILABLE)
        assert lookup.lookups_total == claims.LOOKUPS_PER_S  # this second's budget: the rest wait
        now[0] += 1.0
        assert lookup.owner(10**10) is Owner.UNKNOWN
        assert lookup.lookups_total == claims.LOOKUPS_PER_S + 1
    finally:
        lookup.close()
    assert OwnerLookup("").owner(1) is Owner.NO_STORE


def test_a_ledger_whose_metadata_names_no_key_keeps_first_add_binding(one):
    ens = one
    lid = 12_345_678_901
    create_ledgers(ens.metadata_uri, [lid], None)  # an older client's ledger: no key_check
    with RawBookieClient(ens.bookies[0]) as raw:
        assert raw.add(lid, [make_entry(lid, 0, b"first")], STRANGER) == Status.OK
        assert raw.add(lid, [make_entry(lid, 1, b"second")], KEY) == Status.UNAUTHORIZED


def test_the_resolver_works_lookups_and_verdicts_out_off_the_loop(tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    with open_metadata(uri, create=True) as store:
        lid = store.create_ledger(LedgerMetadata(1, 1, 1, key_check=make_key_check(KEY),
                                                 fragments=[(0, ["b:1"])]))[0]
    resolver = OwnerResolver(OwnerLookup(uri))
    table = LedgerTable(verify=resolver.verified)
    try:
        def settle(ledger_id, key, credential=False):
            while not resolver.ready(table, ledger_id, key, credential):
                deadline = time.monotonic() + 10
                while not resolver.done and time.monotonic() < deadline:
                    time.sleep(0.005)
                assert ledger_id in resolver.drain()
        # the first request only queues work: the loop never waits for the store or a verifier
        assert not resolver.ready(table, lid, KEY, False)
        settle(lid, KEY)
        assert table.check_add(lid, KEY, False, owner=resolver.owner(lid)).key
        settle(lid, STRANGER)
        with pytest.raises(Rejected) as refused:
            table.check_add(lid, STRANGER, False, owner=resolver.owner(lid))
        assert refused.value.status == Status.UNAUTHORIZED
        settle(lid + 1000, KEY)  # nobody created it
        with pytest.raises(Rejected) as refused:
            table.check_add(lid + 1000, KEY, False, owner=resolver.owner(lid + 1000))
        assert refused.value.status == Status.NO_LEDGER
        assert resolver.verifications_total == 2  # one per (check, key), however often asked
        assert resolver.ready(table, lid, b"", False)  # a bad key size is refused at once
    finally:
        resolver.close()


@pytest.mark.security
def test_on_zookeeper_every_bookie_asks_the_store_before_it_stores(zk_uri):
    """The same rule with three bookies on ZooKeeper (the lookup follows a sync: the writer may
    have created the ledger through another server a moment ago)."""
    with LocalBookies(3, metadata_uri=zk_uri, conf=CONF) as ens, open_metadata(zk_uri) as store, \
            BookKeeper(zk_uri) as bk:
        nxt = store.ledger_id_high_water() + 1
        for b in ens.bookies:
            with RawBookieClient(b) as raw:
                assert raw.add(nxt, [make_entry(nxt, 0, b"squat")], STRANGER) == Status.NO_LEDGER
                assert raw.fence(nxt + 1, STRANGER) == Status.NO_LEDGER
        for _ in range(2):
            lh = _create(bk, 3)
            for i in range(5):
                lh.add_entry(b"real %d" % i, timeout_s=10)
            lh.close()
            assert _read_back(bk, lh.ledger_id) == [b"real %d" % i for i in range(5)]
