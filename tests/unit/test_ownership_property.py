"""rebuild(logs) == live state, on real storage (bookie.core.ledgers, invariant 8).

Random interleavings of the requests a bookie takes (adds, recovery adds, fences, explicit
LACs, copies and fences on the recovery credential, from the owner and from strangers, on ledgers
whose metadata names an owner, names none, or does not exist), GC deletes, compactions, crashes
(the uncommitted index lost, the journal replayed from the last checkpoint) and index rebuilds,
run against a real LMDB index and real entry logs in a temp directory, decided by the add
worker's own machine (``bookie.core.adds``: one ``take`` per request, over a view of this
storage) and replayed by
its own replay step (``bookie.storage.journal_replay.store_replayed``), never a copy of them.  After every rebuild, the index rebuilt from the entry logs alone holds
exactly what the live index held: the same ledgers with the same binding, fence and explicit LAC,
the same deleted ids, the same entries with the same bytes.  And no entry ever changes its bytes.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from bookie import wire
from bookie.core.adds import FENCE, AddMachine, PlaceAdd, PlaceRecord, Request
from bookie.core.answers import JournalAnswers
from bookie.core.ledgers import Owner
from bookie.metadata.ledger import make_key_check
from bookie.metadata.recovery_secret import credential
from bookie.storage import compaction, deletes, records
from bookie.storage.entrylog import EntryLogs
from bookie.storage.index import Index, open_index
from bookie.storage.index_rebuild import rebuild_index
from bookie.storage.inspect import index_path, ledger_dirs_of
from bookie.storage.journal_replay import store_replayed
from bookie.storage.ledger_storage import LedgerStorage
from bookie.testing.rawclient import make_entry
from bookie.workers.config import BookieConfig
from add_views import PlainView

SECRET = bytes(range(32))
OWNER_KEY = b"owner"
KEYS = [OWNER_KEY, b"stranger"]
# What the metadata store says of each ledger id: an owner named, no key named (an older
# client's ledger), no such ledger.
OWNERS = {0: make_key_check(OWNER_KEY), 1: make_key_check(OWNER_KEY), 2: Owner.NO_CHECK, 3: Owner.UNKNOWN}
LEDGERS = st.sampled_from(sorted(OWNERS))
ADD_FLAGS = {(False, False): 0, (True, False): int(wire.Flag.RECOVERY_ADD),
             (True, True): int(wire.Flag.RECOVERY_ADD | wire.Flag.RECOVERY_CREDENTIAL)}

op = st.one_of(
    st.tuples(st.just("add"), LEDGERS, st.sampled_from(KEYS), st.integers(0, 7), st.integers(1, 3),
              st.booleans(), st.sampled_from([b"a", b"b"])),
    st.tuples(st.just("cred_add"), LEDGERS, st.integers(0, 7), st.sampled_from([b"a", b"b"])),
    st.tuples(st.just("fence"), LEDGERS, st.sampled_from(KEYS)),
    st.tuples(st.just("cred_fence"), LEDGERS),
    st.tuples(st.just("write_lac"), LEDGERS, st.sampled_from(KEYS), st.integers(-1, 7)),
    st.tuples(st.just("delete"), LEDGERS),
    st.tuples(st.just("compact"),),
    st.tuples(st.just("crash"),),
    st.tuples(st.just("rebuild"),),
)


class StorageView(PlainView):
    """What the add worker's loop would tell the machine (core/adds.py ``View``), from this
    storage: the owner resolver answers at once (``OWNERS``), the ring always has room."""

    def __init__(self, bookie):
        self.bookie = bookie

    def owner(self, ledger_id):
        return OWNERS[ledger_id]

    def held_entries(self, ledger_id, entry_ids):
        return self.bookie.storage.held_entries(ledger_id, entry_ids)

    def uncommitted(self, ledger_id):
        return self.bookie.storage.uncommitted(ledger_id)

    def write_position(self, journal):
        return len(self.bookie.journal)

    def safe_to(self, journal):
        return len(self.bookie.journal)

    def ring_free(self, journal):
        return 1 << 30

    def ring_capacity(self, journal):
        return 1 << 30


class Bookie:
    """One bookie's storage, driven as the add worker drives it (no sockets, no ring: the
    journal is the list of records placed, and a checkpoint's mark an index into it)."""

    def __init__(self, root: str):
        for d in ("j", "l"):
            os.makedirs(os.path.join(root, d, "current"))
        self.conf = BookieConfig.from_mapping({
            "journalDirectory": os.path.join(root, "j"), "ledgerDirectories": os.path.join(root, "l"),
            "logSizeLimit": "4096", "indexMapSizeMB": "16", "bookiePort": "3999"})
        self.dirs = ledger_dirs_of(self.conf)
        self.journal: list[bytes] = []
        self.mark = 0
        self.bytes_seen: dict[tuple[int, int], bytes] = {}  # every entry ever acknowledged
        self._open()

    def _open(self):
        self.env = open_index(os.path.dirname(index_path(self.conf)), self.conf.index_map_size_bytes)
        self.index = Index(self.env)
        self.logs = EntryLogs(self.dirs, self.conf.log_size_limit_bytes, False, self.index)
        self.storage = LedgerStorage(self.index, self.logs)
        self.storage.table.recovery_secret = SECRET
        # the add worker's decisions, over this storage's table (one journal here)
        self.machine = AddMachine(self.storage.table, 1, 1000, 1 << 20)
        self.machine.answers = JournalAnswers(1, 1000, lambda frame, ident: None)
        self.view = StorageView(self)

    def close(self):
        self.storage.close()
        self.logs.close()
        self.env.close()

    # -- the live path -------------------------------------------------------------------------
    def _place(self, rec: bytes, entries=None):
        self.journal.append(rec)
        self._apply(rec)

    def _apply(self, rec: bytes):
        """What the add worker does with a placed record, and replay with a journal's."""
        parsed = records.parse(rec, 0)
        if self.storage.table.apply(parsed):
            store_replayed(self.storage, parsed, rec, 0)

    def take(self, op, lid, key, flags=0, body=(), cred=False):
        """One request through the machine; its placed record (if any) into the journal."""
        for a in self.machine.take(Request(op, lid, 0, flags, key, body, cred, None), self.view, 0.0):
            if type(a) is PlaceAdd:
                parts, _, _ = records.add_batch_parts(lid, a.key, a.lengths_frame, a.data, flags=a.flags)
                self._place(b"".join(parts))
                mv = memoryview(a.data)
                for e, o, n_bytes in zip(a.entry_ids, a.offsets, a.lengths):
                    self.bytes_seen.setdefault((lid, int(e)), bytes(mv[int(o):int(o) + int(n_bytes)]))
            elif type(a) is PlaceRecord:
                self._place(records.fence_record(lid, a.key, a.flags) if a.lac is None
                            else records.lac_record(lid, a.lac, a.key, a.flags))

    def add(self, lid, key, first, n, recovery, payload, credential_add=False):
        entries = [make_entry(lid, e, payload * (e + 1)) for e in range(first, first + n)]
        if credential_add:
            key, recovery = credential(SECRET, lid), True
        self.take(int(wire.Op.ADD), lid, key, ADD_FLAGS[(recovery, credential_add)],
                  wire.pack_batch(entries))

    def fence(self, lid, key, cred=False):
        self.take(FENCE, lid, credential(SECRET, lid) if cred else key, cred=cred)

    def write_lac(self, lid, key, lac):
        self.take(int(wire.Op.WRITE_LAC), lid, key, body=(lac,))

    def commit(self):
        self.storage.commit()

    def checkpoint(self):
        self.commit()
        self.logs.sync()
        self.env.sync(True)
        self.mark = len(self.journal)

    # -- the other paths -----------------------------------------------------------------------
    def delete(self, lid):
        self.checkpoint()
        with self.env.begin() as txn:
            if self.index.get_ledger(txn, lid) is None:
                return
        deletes.delete_ledgers(self.index, self.dirs, [lid])
        self.commit()  # the add side takes the tombstone in

    def compact(self):
        self.checkpoint()
        for w in self.logs.writers:  # roll, so every log written so far may be compacted
            w.roll()
        self.storage._batches.append(("current_logs", self.logs.current_ids()))
        self.checkpoint()
        _, maps, current = compaction.held_ledgers(self.index)
        for log_id in sorted(maps):
            if log_id not in current and log_id < max(current):
                compaction.compact_log(self.index, self.dirs, log_id, compaction.Throttle(0))

    def crash(self):
        """Every process killed: what was not committed to the index is gone; the journal is
        replayed from the last checkpoint into the entry logs and the index."""
        self.storage._batches.clear()  # never committed
        self.storage.log_counts.clear()
        self.close()
        self._open()
        for rec in self.journal[self.mark:]:
            self._apply(rec)
        self.checkpoint()

    def state(self) -> tuple[dict, set, dict]:
        from bookie.storage.entrylog import EntryLogReader
        reader = EntryLogReader(self.dirs)
        try:
            with self.env.begin() as txn:
                ledgers = {lid: self.index.get_ledger(txn, lid) for lid in self.index.ledger_ids(txn)}
                gone = {lid for lid in OWNERS if self.index.is_deleted(txn, lid)}
                entries = {}
                for lid in ledgers:
                    for e in range(16):
                        loc = self.index.locate(txn, lid, e)
                        if loc is not None:
                            entries[(lid, e)] = bytes(reader.read(*loc))
        finally:
            reader.close()
        return ledgers, gone, entries

    def rebuild(self):
        """The index lost (the journal too: everything was checkpointed into the logs) and
        rebuilt from the entry logs; it must equal what the live index held."""
        self.checkpoint()
        live = self.state()
        self.close()
        os.rename(index_path(self.conf), index_path(self.conf) + ".lost")
        rebuild_index(self.conf)
        import shutil
        shutil.rmtree(index_path(self.conf) + ".lost")
        self._open()
        rebuilt = self.state()
        assert rebuilt[0] == live[0], "ledger records differ"
        assert rebuilt[1] == live[1], "deleted ids differ"
        assert rebuilt[2] == live[2], "entries differ"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=30))
# found by a CI run: the fence restated by compaction lies in a newer log than the LAC written
# after it, so the rebuild met the LAC before anything bound its ledger, and dropped it
@example(ops=[("fence", 0, OWNER_KEY), ("compact",), ("write_lac", 0, OWNER_KEY, 0)])
def test_rebuild_from_the_logs_equals_the_live_state_over_any_interleaving(tmp_path_factory, ops):
    bookie = Bookie(str(tmp_path_factory.mktemp("b")))
    try:
        for o in ops:
            kind = o[0]
            if kind == "add":
                bookie.add(o[1], o[2], o[3], o[4], o[5], o[6])
            elif kind == "cred_add":
                bookie.add(o[1], None, o[2], 1, True, o[3], credential_add=True)
            elif kind == "fence":
                bookie.fence(o[1], o[2])
            elif kind == "cred_fence":
                bookie.fence(o[1], None, cred=True)
            elif kind == "write_lac":
                bookie.write_lac(o[1], o[2], o[3])
            elif kind == "delete":
                bookie.delete(o[1])
            elif kind == "compact":
                bookie.compact()
            elif kind == "crash":
                bookie.crash()
            else:
                bookie.rebuild()
            bookie.commit()
            # write-once: whatever the index points at is what was first acknowledged
            for key, data in bookie.state()[2].items():
                assert data == bookie.bytes_seen[key]
        bookie.rebuild()
        ledgers, gone, _ = bookie.state()
        assert 3 not in ledgers  # no ledger the store does not know is ever held
        for lid in gone:
            assert lid not in ledgers
    finally:
        bookie.close()


def test_a_fence_is_restated_by_compaction_and_survives_a_rebuild(tmp_path):
    bookie = Bookie(str(tmp_path))
    try:
        bookie.add(0, OWNER_KEY, 0, 3, False, b"x")
        bookie.fence(0, OWNER_KEY)
        bookie.write_lac(0, OWNER_KEY, 2)
        bookie.add(1, OWNER_KEY, 0, 3, False, b"y" * 500)
        bookie.delete(1)  # the log's live share drops: compaction rewrites it
        bookie.compact()
        assert bookie.state()[0][0]["fenced"]
        bookie.rebuild()
        assert bookie.state()[0][0]["fenced"] and bookie.state()[0][0]["lac"] == 2
    finally:
        bookie.close()


@pytest.mark.parametrize("first_after_restart", ["replayed", "added"])
def test_an_entry_stored_before_a_restart_stays_write_once_whatever_is_stored_first_after_it(
        tmp_path, first_after_restart):
    """Write-once across a restart (found by the property above: cred_add 1/5 b, delete, cred_add
    1/0 a, crash, cred_add 1/5 a).  The storage keeps each ledger's highest stored entry id to
    skip the held-entry lookup of ids above it; after a restart that memory was started from the
    first entry stored (a journal replay's, or a live add's): entry 0 made the highest id 0,
    and entry 5, stored before the restart, could then be written again with other bytes."""
    bookie = Bookie(str(tmp_path))
    try:
        bookie.add(0, OWNER_KEY, 5, 1, False, b"b")
        bookie.checkpoint()
        if first_after_restart == "replayed":
            bookie.add(0, OWNER_KEY, 0, 1, False, b"a")  # after the mark: the restart replays it
            bookie.commit()
            bookie.crash()
        else:
            bookie.crash()
            bookie.add(0, OWNER_KEY, 0, 1, False, b"a")
            bookie.commit()
        bookie.add(0, OWNER_KEY, 5, 1, False, b"a")  # other bytes: must be ENTRY_EXISTS
        bookie.commit()
        assert bookie.state()[2][(0, 5)] == bookie.bytes_seen[(0, 5)]
    finally:
        bookie.close()
