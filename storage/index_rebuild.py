"""The index is a cache of the entry logs: checked at start-up, rebuilt on demand, verified.

Theory of operation
-------------------
Everything the LMDB index holds can be found again on the bookie's disks:

- **entry locations**: every ADD_BATCH record in an entry log names its ledger and holds its
  entries whole (each entry starts with its ledger and entry id), so a scan of the logs finds
  every entry and where it lies.  The same (ledger, entry) may lie in two logs: compaction
  copies live entries into a new log and deletes the old one only after the index points at the
  copy, so a crash in between leaves both (identical bytes).  A rebuild takes the copy in the
  log with the higher id, as the live index did; neither a rebuild nor a check calls that
  corruption.
- **ledger records** (binding, fenced, explicit LAC, deleted): every record carries its
  ledger's key (or its owner's check), and the entry logs hold every FENCE and LAC record as
  well as the adds (compaction restates them beside the copies it makes).  A rebuild marks
  deleted every id of the bookie's durable list of deletes (``bookie.storage.deletes``), then
  applies, through the one ledger table of ``bookie.core.ledgers``, every record of every entry
  log and then every record of every journal file still on disk (backups included): the rule
  book's invariant 8 makes that the table the live path built, whatever journal files rolled
  away and whatever was compacted.  What the old index still holds, when it can be read, is
  merged in only where it adds protection (fenced, a higher explicit LAC, deletion tombstones).
- **ledger maps** (bytes per ledger in each log, the GC's and compaction's input): counted from
  the entries the rebuilt index points at, the FENCE and LAC records of live ledgers, plus
  deleted ledgers' entries (the dead share compaction reclaims); a log whose entries were all
  copied elsewhere gets an empty map.
- **other bookkeeping** in ``meta`` (the log id sequence, a compaction's step record) is kept
  from the old index when it can be read; a log a compaction was still copying into (state
  "copying": never synced nor pointed at) is not indexed, and its recovery removes it.
- **LastLogMark** is not the index's: it stays.  The start that follows replays the journal
  from it as always, which stores again whatever the entry logs lost after the mark.

The check at start-up (``check_index``) is cheap: one cursor step per ledger and a few bytes of
each log's indexed tail (the furthest of the ledgers' last entries in it), not a scan; deeper
damage is ``consistency_check``'s to find.  It refuses (one line naming the fix) when the index is
missing while entry logs hold data, cannot be opened, points at a log that is missing, past
the end of a log, or at bytes that are not the entry it names.  (BookKeeper refuses a missing
index too, rather than rebuilding behind the operator's back: a rebuilt index can lose a fence
that only the old one held.)

A rebuild writes a new environment beside the old one (``index.rebuild``), syncs it, then
swaps it in by rename; a crash during the rebuild leaves the old index as it was.  It holds
the bookie's directory lock throughout, so no bookie runs on the directories meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections import defaultdict

import numpy as np

from bookie.storage import deletes, records
from bookie.storage.inspect import (
    EntryLogFile, IndexUnreadable, InspectError, digest_kind, in_child, index_path,
    iter_journal, ledger_dirs_of, log_paths, open_index_readonly)
from bookie.storage.journal import fsync_dir
from bookie.storage.layout import LayoutError, all_dirs, current_dir, key_salt
from bookie.core.ledgers import LedgerTable, StoredLedger
from bookie.storage.index import Index, open_index_at
from bookie.storage.entrylog import EntryLogReader, log_name
from bookie.storage.index_check import Progress
from bookie.storage.dirlock import DirectoryLock


@dataclasses.dataclass
class RebuildReport:
    index: str = ""
    logs: int = 0
    entries: int = 0  # (ledger, entry) pairs the rebuilt index holds
    copies: int = 0  # entries found in more than one place (a recovery add, a compaction copy)
    ledgers: int = 0
    fenced: int = 0
    deleted: int = 0
    journal_records: int = 0
    salvaged_from_old_index: bool = False
    warnings: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0




def rebuild_index(conf, progress: Progress | None = None, fence_all: bool = False) -> RebuildReport:
    """Rebuild the bookie's index from its entry logs and journal (see the module docstring).

    Args:
        fence_all: restore every ledger fenced, whatever the journal says: for an operator who
            knows fences were lost (journal files and the old index gone) and would rather
            have the writers of open ledgers move to new ledgers than risk an old writer.

    Raises:
        DirectoryInUseError: a bookie runs on these directories (nothing was changed).
        OSError: a disk error; the old index is left in place.
    """

    lock = DirectoryLock.acquire(all_dirs(conf), purpose="rebuild its index")
    try:
        return _rebuild(conf, progress or (lambda *a: None), fence_all)
    finally:
        lock.release()


@dataclasses.dataclass
class _Salvage:
    """What the old index still yields (nothing when it is gone or unreadable)."""

    records: dict[int, StoredLedger] = dataclasses.field(default_factory=dict)
    tombstones: set[int] = dataclasses.field(default_factory=set)
    meta: dict[str, str] = dataclasses.field(default_factory=dict)  # ``Index.bookkeeping``
    compaction: dict | None = None  # ``Index.compaction_state``

    def unfinished_copy(self) -> int | None:
        """The log a compaction was still copying into (state "copying"): unsynced, never
        pointed at, and unlinked by the compaction's own recovery at the next start."""
        try:
            state = self.compaction or {}
            return int(state["new"]) if state.get("state") == "copying" else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _salvage(conf, report: RebuildReport) -> _Salvage:
    """Read the old index in a child process: a damaged one must not crash the rebuild meant to
    replace it."""
    if not os.path.exists(os.path.join(index_path(conf), "data.mdb")):
        return _Salvage()
    try:
        held, gone, meta, compaction = in_child(lambda: _read_old_index(conf), "the old index")
    except IndexUnreadable as e:
        report.warnings.append(f"nothing kept from the old index: {e}")
        return _Salvage()
    report.salvaged_from_old_index = True
    return _Salvage({lid: StoredLedger.from_dict(raw) for lid, raw in held}, set(gone), meta,
                    compaction)


def _read_old_index(conf) -> tuple[list, list, dict, dict | None]:
    env, index = open_index_readonly(conf)
    try:
        with index.begin() as txn:
            held = [(lid, index.get_ledger(txn, lid)) for lid in index.ledger_ids(txn)]
            gone = sorted(index.deleted_ids(txn))
            try:
                compaction = index.compaction_state(txn)
            except ValueError:  # a damaged record: nothing to skip for it
                compaction = None
            return held, gone, index.bookkeeping(txn), compaction
    finally:
        env.close()


def _rebuild(conf, progress: Progress, fence_all: bool) -> RebuildReport:
    t0 = time.monotonic()
    final = index_path(conf)
    report = RebuildReport(index=final)
    old = _salvage(conf, report)
    skip = old.unfinished_copy()
    work = final + ".rebuild"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work, mode=0o700)
    env = open_index_at(work, conf.index_map_size_bytes)
    try:
        index = Index(env)
        table = LedgerTable(salt=_salt(conf))  # keys in their stored form, as the bookie's
        for ledger_id in old.tombstones | deletes.read(ledger_dirs_of(conf)[0]):
            table.mark_deleted(ledger_id)  # before any record: deleted stays deleted
        found = _index_logs(conf, index, table, report, progress, skip)
        _apply_journal(conf, table, report, progress)
        _write_ledgers(index, table, old.records, old.tombstones, report, fence_all)
        _write_maps(index, found, report, progress)
        _write_meta(conf, index, old.meta)
        index.sync()
    finally:
        env.close()
    previous = final + ".old"
    shutil.rmtree(previous, ignore_errors=True)
    if os.path.exists(final):
        os.rename(final, previous)
    os.rename(work, final)
    fsync_dir(os.path.dirname(final))
    shutil.rmtree(previous, ignore_errors=True)
    report.seconds = time.monotonic() - t0
    return report


@dataclasses.dataclass
class _Found:
    """What the walk over the entry logs found besides the locations it indexed."""

    # bytes of live ledgers' FENCE and LAC records per log (in the maps, as on the live path)
    state_bytes: dict[int, dict[int, int]] = dataclasses.field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    whole: set[int] = dataclasses.field(default_factory=set)  # logs read to their end
    # bytes of deleted ledgers per log: not indexed, but in the maps, so that compaction sees
    # them as the dead share of their logs (as in the live index's maps)
    deleted_bytes: dict[int, dict[int, int]] = dataclasses.field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int)))


def _index_logs(conf, index: Index, table: LedgerTable, report: RebuildReport,
                progress: Progress, skip: int | None) -> _Found:
    """Put the location of every entry of every log (ascending log id: a later copy wins), but
    of ``skip``, the log an unfinished compaction was copying into."""
    logs = log_paths(ledger_dirs_of(conf))
    if skip is not None and any(log_id == skip for log_id, _ in logs):
        report.warnings.append(f"{log_name(skip)}: an unfinished compaction's copy: not indexed "
                               f"(the compaction's recovery removes it at the next start)")
        logs = [(log_id, path) for log_id, path in logs if log_id != skip]
    found = _Found()
    earlier = EntryLogReader(ledger_dirs_of(conf))
    try:
        _index_each_log(logs, index, table, report, progress, found, earlier)
    finally:
        earlier.close()
    progress("entry logs", len(logs), len(logs), report.entries)
    return found


def _salt(conf) -> bytes:
    """The bookie's master-key salt (its cookie's instance id); records an older bookie wrote
    with the key in clear are stored in the salted form the live bookie compares against.  A
    directory set with no cookie yet (never started) has the empty salt, as its storage had."""
    try:
        return key_salt(conf)
    except LayoutError:
        return b""


def _index_each_log(logs, index, table, report, progress, found: _Found, earlier) -> None:
    last_note = 0.0
    for n, (log_id, path) in enumerate(logs):
        try:
            elog = EntryLogFile(path)
        except InspectError as e:
            report.warnings.append(f"{e}: skipped")
            continue
        with elog, index.begin(write=True) as txn:
            if elog.log_id != log_id:
                report.warnings.append(f"{path}: its header says log id {elog.log_id}: skipped")
                continue
            for pos, rec in elog.records():
                applied = table.apply(rec)
                if rec.type != records.ADD_BATCH:
                    if applied:
                        found.state_bytes[log_id][rec.ledger_id] += rec.size
                    continue
                if not applied:
                    if table.get(rec.ledger_id).deleted:
                        found.deleted_bytes[log_id][rec.ledger_id] += int(rec.lengths.sum())
                    else:
                        report.warnings.append(f"{path} offset {pos}: ledger {rec.ledger_id} with "
                                               f"another master key than its first record: skipped")
                    continue
                _put_record(index, txn, elog, pos, rec, earlier, report)
                now = time.monotonic()
                if now - last_note >= 1.0:
                    last_note = now
                    progress("entry logs", n, len(logs), report.entries)
            if elog.scan.damaged:
                report.warnings.append(f"{path}: {elog.scan.stop}; what follows it is not indexed")
            else:
                found.whole.add(log_id)
        report.logs += 1


def _put_record(index: Index, txn, elog: EntryLogFile, pos: int, rec, earlier: EntryLogReader,
                report: RebuildReport) -> None:
    """Index the entries of one ADD_BATCH record.

    An entry that does not name the record's ledger (bytes that never reached the disk) is not
    indexed.  An entry already indexed from a lower log is a copy: the later one counts, as on
    the live path, unless its bytes differ and only the earlier passes its CRC digest (a copy
    torn by a power loss must not replace a whole one).
    """
    data_at = pos + rec.data_offset
    offsets, ledger_ids, entry_ids = records.batch_entries(rec, elog.buf, pos)
    keep = ledger_ids == rec.ledger_id
    if not keep.all():
        report.warnings.append(f"{elog.path} offset {pos}: {int((~keep).sum())} entries do not "
                               f"name ledger {rec.ledger_id}: not indexed")
    for i in np.flatnonzero(keep).tolist():
        old = index.locate(txn, rec.ledger_id, int(entry_ids[i]))
        if old is None:
            continue
        report.copies += 1
        start = data_at + int(offsets[i])
        new = elog.read(start, int(rec.lengths[i]))
        try:
            was = bytes(earlier.read(*old))
        except OSError:
            continue
        if was != new and digest_kind(new) is None and digest_kind(was) is not None:
            keep[i] = False
            report.warnings.append(f"ledger {rec.ledger_id} entry {int(entry_ids[i])}: the copy "
                                   f"in {log_name(elog.log_id)} fails its digest; the one in "
                                   f"{log_name(old[0])} is kept")
    index.put_locations(txn, rec.ledger_id, entry_ids[keep], elog.log_id,
                        (offsets + data_at)[keep], rec.lengths[keep])
    report.entries += int(keep.sum())


def _apply_journal(conf, table: LedgerTable, report: RebuildReport, progress: Progress) -> None:
    """Fences, explicit LACs and master keys from every journal record still on disk, of every
    journal (a ledger's records are all in one of them: storage/journal_set.py)."""
    last_note = 0.0
    for jrec in (jrec for d in conf.journal_dirs for jrec in iter_journal(current_dir(d), report.warnings)):
        table.apply(jrec.record)
        report.journal_records += 1
        now = time.monotonic()
        if now - last_note >= 1.0:
            last_note = now
            progress("journal", report.journal_records, 0, report.entries)


def _write_ledgers(index: Index, table: LedgerTable, old_records: dict[int, StoredLedger],
                   tombstones: set[int], report: RebuildReport, fence_all: bool) -> None:
    for ledger_id, old in old_records.items():
        if table.get(ledger_id) is None and ledger_id not in tombstones:
            table.ledgers[ledger_id] = StoredLedger(old.master_key, old.fenced, old.lac)
    with index.begin(write=True) as txn:
        for ledger_id, info in sorted(table.ledgers.items()):
            if info.deleted:
                index.mark_deleted(txn, ledger_id)
                report.deleted += 1
                continue
            old = old_records.get(ledger_id)
            if old is not None and old.master_key == info.master_key:
                info.fenced = info.fenced or old.fenced
                info.lac = max(info.lac, old.lac)
            info.fenced = info.fenced or fence_all
            index.put_ledger(txn, ledger_id, info.as_dict())
            report.ledgers += 1
            report.fenced += info.fenced


def _write_meta(conf, index: Index, kept: dict[str, str]) -> None:
    """The old index's other ``meta`` keys as they were (the log id sequence, the compaction's
    state: they belong to the parts of the bookie that wrote them), and as current logs the
    newest log of each ledger directory: the GC leaves those (and any newer) alone until the
    next start rolls new ones."""
    newest = {}
    for log_id, path in log_paths(ledger_dirs_of(conf)):
        newest[os.path.dirname(path)] = log_id
    with index.begin(write=True) as txn:
        index.restore_bookkeeping(txn, kept)
        index.set_current_logs(txn, newest.values())


def _write_maps(index: Index, found: _Found, report: RebuildReport, progress: Progress) -> None:
    """Each log's ledger map: the bytes of the entries the rebuilt index places in it, and of
    deleted ledgers' entries.  A log read to its end whose entries all lie elsewhere too gets
    an empty map: the GC may delete it.  A damaged log keeps no map unless something of it is
    counted (what follows the damage is unknown, so the GC must keep it)."""
    maps = found.deleted_bytes
    for log_id, counts in found.state_bytes.items():
        for ledger_id, n in counts.items():
            maps[log_id][ledger_id] += n
    report.entries = 0
    with index.begin() as txn:
        for ledger_id, _, (log_id, _, length) in index.iter_locations(txn):
            maps[log_id][ledger_id] += length
            report.entries += 1
    logs = set(maps) | found.whole
    with index.begin(write=True) as txn:
        for log_id in sorted(logs):
            index.add_to_log_map(txn, log_id, dict(maps.get(log_id, {})))
    progress("ledger maps", len(logs), len(logs), report.entries)


# ---- local consistency check ---------------------------------------------------------------------
