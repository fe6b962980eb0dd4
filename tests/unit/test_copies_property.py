"""Copies dropped, sent again and compacted (bookie.core.ledgers invariant 9), on real storage.

Random interleavings of adds from the owner, copies on the recovery credential (autorecovery's
resends), fences, explicit LACs, the GC's over-replicated drops, GC deletes, compactions,
crashes (the uncommitted index lost, the journal replayed) and index rebuilds, against a real
LMDB index and real entry logs, driven the way the add worker and the GC worker drive them.
After every step:

- every entry the index names reads back with the bytes first acknowledged (write-once), and
  every entry indexed belongs to a ledger with a record (what is indexed is held);
- a ledger fenced before a drop is fenced after it;
- a compaction loses no indexed entry (the model: what was indexed before it is indexed after);
- a rebuild from the logs alone yields the same records, every live entry, and at most the
  dropped copies more (same bytes).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

from bookie import wire
from bookie.core.ledgers import LedgerTable, Rejected
from bookie.metadata.ledger import make_key_check
from bookie.metadata.recovery_secret import credential
from bookie.storage import compaction, deletes, records
from bookie.storage.entrylog import EntryLogReader, EntryLogs
from bookie.storage.index import Index, open_index
from bookie.storage.index_rebuild import rebuild_index
from bookie.storage.inspect import index_path, ledger_dirs_of
from bookie.storage.ledger_storage import LedgerStorage
from bookie.testing.rawclient import make_entry
from bookie.workers.config import BookieConfig
from bookie.workers.overreplicated import drop_copies

SECRET = bytes(range(32))
OWNER_KEY = b"owner"
OWNERS = {0: make_key_check(OWNER_KEY), 1: make_key_check(OWNER_KEY)}
LEDGERS = st.sampled_from(sorted(OWNERS))

op = st.one_of(
    st.tuples(st.just("add"), LEDGERS, st.integers(0, 7), st.integers(1, 3)),
    st.tuples(st.just("copy"), LEDGERS, st.integers(0, 7), st.integers(1, 3)),
    st.tuples(st.just("fence"), LEDGERS),
    st.tuples(st.just("write_lac"), LEDGERS, st.integers(0, 7)),
    st.tuples(st.just("drop"), LEDGERS),
    st.tuples(st.just("delete"), LEDGERS),
    st.tuples(st.just("compact"),),
    st.tuples(st.just("crash"),),
    st.tuples(st.just("rebuild"),),
)


def _entry(lid: int, e: int) -> bytes:
    return make_entry(lid, e, b"%d.%d:" % (lid, e) * 30)


class Bookie:
    """One bookie's storage, driven as its add worker (journal list, checkpoint mark) and its
    GC worker (drops, deletes, compactions) drive it."""

    def __init__(self, root: str):
        for d in ("j", "l"):
            os.makedirs(os.path.join(root, d, "current"))
        self.conf = BookieConfig.from_mapping({
            "journalDirectory": os.path.join(root, "j"), "ledgerDirectories": os.path.join(root, "l"),
            "logSizeLimit": "4096", "indexMapSizeMB": "16", "bookiePort": "3999"})
        self.dirs = ledger_dirs_of(self.conf)
        self.journal: list[bytes] = []
        self.mark = 0
        self.dropped: set[int] = set()  # ledgers whose copies were dropped at least once
        self._open()

    def _open(self):
        self.env = open_index(os.path.dirname(index_path(self.conf)), self.conf.index_map_size_bytes)
        self.index = Index(self.env)
        self.logs = EntryLogs(self.dirs, self.conf.log_size_limit_bytes, False, self.index)
        self.storage = LedgerStorage(self.index, self.logs)
        self.storage.table.recovery_secret = SECRET

    def close(self):
        self.storage.close()
        self.logs.close()
        self.env.close()

    @property
    def table(self) -> LedgerTable:
        return self.storage.table

    def _place(self, rec: bytes):
        self.journal.append(rec)
        parsed = records.parse(rec, 0)
        if self.table.apply(parsed):
            self._store(parsed, rec)

    def _store(self, rec, buf):
        if rec.type != records.ADD_BATCH:
            self.storage.store_record(rec.ledger_id, bytes(buf))
            return
        offsets, _, entry_ids = records.batch_entries(rec, buf, 0)
        self.storage.store_batch(rec.ledger_id, [buf], rec.size, rec.data_offset, entry_ids,
                                 rec.lengths, offsets)

    def _owner(self, lid):
        return OWNERS[lid] if self.table.needs_owner(lid) else None

    def add(self, lid, first, n, copy):
        try:
            if copy:
                placed = self.table.check_add(lid, credential(SECRET, lid), True, True, self._owner(lid))
            else:
                placed = self.table.check_add(lid, OWNER_KEY, False, False, self._owner(lid))
        except Rejected:
            return
        ids = np.arange(first, first + n)
        held = self.storage.held_entries(lid, ids)
        new = [_entry(lid, e) for i, e in enumerate(range(first, first + n)) if i not in held]
        if new:
            lengths, data = wire.pack_batch(new)
            parts, _, _ = records.add_batch_parts(lid, placed.key, lengths, data, flags=placed.flags)
            self._place(b"".join(parts))

    def fence(self, lid):
        try:
            placed = self.table.check_fence(lid, OWNER_KEY, False, self._owner(lid))
        except Rejected:
            return
        self._place(records.fence_record(lid, placed.key, placed.flags))

    def write_lac(self, lid, lac):
        try:
            placed = self.table.check_write_lac(lid, OWNER_KEY)
        except Rejected:
            return
        self._place(records.lac_record(lid, lac, placed.key, placed.flags))

    def checkpoint(self):
        self.storage.commit()
        self.logs.sync()
        self.env.sync(True)
        self.mark = len(self.journal)

    def drop(self, lid):
        """The GC's over-replicated drop, behind the add worker's back (its table keeps the
        ledger in memory, as the worker's does)."""
        self.storage.commit()
        drop_copies(self.index, lid)
        self.dropped.add(lid)

    def delete(self, lid):
        self.checkpoint()
        with self.env.begin() as txn:
            if self.index.get_ledger(txn, lid) is None:
                return
        deletes.delete_ledgers(self.index, self.dirs, [lid])
        self.storage.commit()

    def compact(self):
        self.checkpoint()
        for w in self.logs.writers:
            w.roll()
        self.storage._batches.append(("current_logs", self.logs.current_ids()))
        self.checkpoint()
        held, maps, current = compaction.held_ledgers(self.index)
        # as the GC worker chooses (live share under the major threshold), and every log too
        for c in compaction.choose(maps, held, current, 1.01, compaction.skipped_logs(self.index)):
            compaction.compact_log(self.index, self.dirs, c.log_id, compaction.Throttle(0))

    def crash(self):
        self.storage._batches.clear()
        self.storage.log_counts.clear()
        self.close()
        self._open()
        for rec in self.journal[self.mark:]:
            parsed = records.parse(rec, 0)
            if self.table.apply(parsed):
                self._store(parsed, rec)
        self.checkpoint()

    def state(self):
        reader = EntryLogReader(self.dirs)
        try:
            with self.env.begin() as txn:
                ledgers = {lid: self.index.get_ledger(txn, lid) for lid in self.index.ledger_ids(txn)}
                entries = {}
                for lid in OWNERS:
                    for e in range(12):
                        loc = self.index.locate(txn, lid, e)
                        if loc is not None:
                            entries[(lid, e)] = bytes(reader.read(*loc))
        finally:
            reader.close()
        return ledgers, entries

    def rebuild(self):
        self.checkpoint()
        live = self.state()
        self.close()
        os.rename(index_path(self.conf), index_path(self.conf) + ".lost")
        rebuild_index(self.conf)
        shutil.rmtree(index_path(self.conf) + ".lost")
        self._open()
        rebuilt = self.state()
        assert rebuilt[0] == live[0], "ledger records differ"
        for key, data in live[1].items():
            assert rebuilt[1].get(key) == data, f"entry {key} lost by the rebuild"
        for key in set(rebuilt[1]) - set(live[1]):
            assert key[0] in self.dropped, f"entry {key} came back although never dropped"


def _run(bookie: Bookie, ops):
    for o in ops:
        kind = o[0]
        fenced_before = {lid: (r or {}).get("fenced", False) for lid, r in bookie.state()[0].items()}
        indexed_before = set(bookie.state()[1])
        if kind in ("add", "copy"):
            bookie.add(o[1], o[2], o[3], kind == "copy")
        elif kind == "fence":
            bookie.fence(o[1])
        elif kind == "write_lac":
            bookie.write_lac(o[1], o[2])
        elif kind == "drop":
            bookie.drop(o[1])
        elif kind == "delete":
            bookie.delete(o[1])
        elif kind == "compact":
            bookie.compact()
        elif kind == "crash":
            bookie.crash()
        else:
            bookie.rebuild()
        bookie.storage.commit()
        ledgers, entries = bookie.state()
        for (lid, e), data in entries.items():
            assert data == _entry(lid, e)
            assert lid in ledgers, f"ledger {lid} has indexed entries and no record"
        for lid, was in fenced_before.items():
            if was and lid in ledgers:
                assert ledgers[lid]["fenced"], f"ledger {lid} lost its fence ({kind})"
        if kind == "compact":
            assert indexed_before <= set(entries), "compaction lost indexed entries"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=25))
# issue 32 item 1: copied, dropped, copied again, compacted: the copies stay
@example(ops=[("add", 0, 0, 3), ("fence", 0), ("drop", 0), ("copy", 0, 0, 3), ("compact",), ("crash",),
              ("rebuild",)])
# found by this property: a drop left the record with no entry to carry its binding, and a
# compaction of the log wrote nothing of the ledger: a rebuild lost the record
@example(ops=[("add", 0, 0, 1), ("drop", 0), ("compact",)])
def test_drops_copies_and_compactions_keep_what_is_indexed_and_the_fence(tmp_path_factory, ops):
    bookie = Bookie(str(tmp_path_factory.mktemp("b")))
    try:
        _run(bookie, ops)
        bookie.rebuild()
    finally:
        bookie.close()


def test_copies_sent_again_after_a_drop_have_a_record_and_survive_compaction(tmp_path):
    bookie = Bookie(str(tmp_path))
    try:
        _run(bookie, [("add", 0, 0, 3), ("fence", 0), ("add", 1, 0, 3), ("drop", 0), ("copy", 0, 0, 3),
                      ("delete", 1), ("compact",)])
        ledgers, entries = bookie.state()
        assert ledgers[0]["fenced"] and all((0, e) in entries for e in range(3))
    finally:
        bookie.close()
