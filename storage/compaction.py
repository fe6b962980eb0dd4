"""Entry-log compaction: which logs to rewrite, and the transactional steps that rewrite one.

Theory of operation
-------------------
Entry logs are interleaved: one live ledger keeps a whole log alive.  A log's *live share* is
the part of its ledger map (``Index.log_maps``: ledger -> bytes stored) that belongs to ledgers
this bookie still holds: every ledger named by a record or by an indexed entry, unless it is in
the deleted table (``bookie.core.ledgers`` invariant 9: copies indexed again after an
over-replicated drop are live; the drop itself set the dropped bytes' count to 0).  ``choose`` takes the logs under a threshold (minor 0.2, major 0.8 by
default), lowest live share first: each byte copied then frees the most.  It never takes a log
being written (the snapshot's current logs), one newer than the newest current log (its map may
be incomplete), one without a map, or one a previous pass gave up on (``skipped``).

One log ``old`` is rewritten in five steps, each durable before the next starts, with the step
recorded in the index (``meta`` key ``compaction``) so that a crash anywhere is finished or
undone by ``recover`` at the next start (or the next pass)::

    1 intent     allocate ``new``; commit {"old", "new", "state": "copying"}; sync the index
    2 copy       create ``new`` in old's directory; copy the live entries of every held ledger
                 of old's map as ADD_BATCH records bound as the ledger is
                 (``StoredLedger.copy_binding``; a held ledger none of whose entries is
                 here - its copies were dropped - gets an ADD_BATCH of no entries carrying
                 that binding), each ledger's followed by its fence and explicit LAC
                 restated (``state_records``), so that a rebuild from ``new`` alone reaches
                 the ledger's state (rate-limited); each entry is checked against its index
                 key (ledger id and entry id in its header)
    3 sync       fdatasync ``new`` (it was synced every 4 MiB while copied, so this one is short)
    4 repoint    every entry whose location is *still* in ``old`` (compare-and-set: one moved
                 by a recovery add meanwhile keeps its new place) points into ``new``, in write
                 transactions of at most 4096 entries (the first records "repointing"); then
                 one transaction writes new's map, removes old's, records "repointed"; sync
                 the index.  A log of small entries in one transaction held the index's single
                 writer for up to 0.7 s on a loaded host, and every foreground add waited.
    5 delete     wait until no reader holds an index snapshot older than step 4, unlink
                 ``old``, fsync its directory, clear the state

``recover``: state "copying" -> unlink ``new`` (nothing points into it); "repointing" ->
``new`` is synced and every entry is in one of the two logs: read new's records back and finish
step 4 (the same compare-and-set), then step 5; "repointed" -> finish step 5.  Nothing is lost (an entry is always reachable through a synced log the index
names) and nothing leaks (a half-written ``new`` is always named in the state).

A corrupt entry (short read, a header naming another entry) stops that log's rewrite: it is
undone, the entry reported (log line, ``bookie_compaction_failed_logs_total``), the log added
to ``meta`` ``compaction_skipped`` and never tried again; the pass goes on with the next log.
Running out of time (``*CompactionMaxTimeMillis``), stopping, or want of space undo the log
being copied the same way, without skipping it.

Reads stay correct throughout (DESIGN "read-after-ack"): until step 4 the index names ``old``,
which is complete; after it, ``new``, synced before.  A read transaction begun before step 4
may still open ``old``: step 5 waits for it (``Index.has_reader_older_than``).  The read worker closes cached
fds of deleted logs (``EntryLogReader.prune``) so their space comes back.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Mapping

import numpy as np

from bookie.wire import ENTRY_HEADER, LENGTHS_DTYPE
from bookie.core import ledgers as ledger_rules
from bookie.core.ledgers import StoredLedger
from bookie.storage import records
from bookie.storage.journal import fsync_dir
from bookie.storage.index import Index
from bookie.storage.entrylog import LOG_HEADER_SIZE, create_log, find_log, log_name

RECORD_MAX_ENTRIES = 1024
RECORD_MAX_BYTES = 1 << 20
READERS_WAIT_S = 30.0
SYNC_EVERY_BYTES = 4 << 20  # the new log is synced as it grows
REPOINT_BATCH_ENTRIES = 4096  # entries per repoint transaction (they hold the index's writer)


# -- planning (pure) -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Candidate:
    log_id: int
    live_bytes: int
    total_bytes: int

    @property
    def live_share(self) -> float:
        return self.live_bytes / self.total_bytes if self.total_bytes else 0.0


def choose(log_maps: Mapping[int, Mapping[int, int]], held_ledgers: Iterable[int],
           current_logs: Iterable[int], threshold: float, skipped: Iterable[int] = ()) -> list[Candidate]:
    """The logs one compaction pass rewrites, lowest live share first (then oldest).

    Args:
        log_maps: log_id -> {ledger_id: bytes stored}, from one index snapshot.
        held_ledgers: the ledgers in that snapshot (deleted ones are not).
        current_logs: the logs being written in that snapshot.
        threshold: take logs whose live share is under this (<= 0: none).
        skipped: logs a previous pass gave up on (a corrupt entry).
    Returns:
        candidates; invariant: none is current, newer than the newest current log, skipped,
        without a map, or at or above the threshold.
    """
    if threshold <= 0:
        return []
    held = set(held_ledgers)
    current = set(current_logs)
    newest_current = max(current, default=0)
    skip = set(skipped)
    out = []
    for log_id, ledgers in log_maps.items():
        if log_id in current or log_id > newest_current or log_id in skip:
            continue
        total = sum(ledgers.values())
        live = sum(n for lid, n in ledgers.items() if lid in held)
        c = Candidate(log_id, live, total)
        if c.live_share < threshold:
            out.append(c)
    out.sort(key=lambda c: (c.live_share, c.log_id))
    return out


class Throttle:
    """A token bucket: ``rate`` units a second, bursts of at most one second's worth.

    ``wait_s(n)`` takes ``n`` units and says how long to sleep first (0 when ``rate`` <= 0).
    The clock is an argument, so tests need no sleeping.
    """

    def __init__(self, rate: float, by_bytes: bool = False, clock=time.monotonic):
        self.rate = rate
        self.by_bytes = by_bytes  # units are bytes, else entries
        self.clock = clock
        self.tokens = rate
        self.at = clock()

    def wait_s(self, n: int) -> float:
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


# -- the steps -----------------------------------------------------------------------------------
class CorruptEntry(Exception):
    """An entry of the log being compacted cannot be what its index says it is."""

    def __init__(self, log_id: int, ledger_id: int, entry_id: int, offset: int, why: str):
        super().__init__(f"entry log {log_name(log_id)}: ledger {ledger_id} entry {entry_id} "
                         f"at offset {offset}: {why}")
        self.log_id, self.ledger_id, self.entry_id, self.offset = log_id, ledger_id, entry_id, offset


class Abandoned(Exception):
    """The rewrite of one log was undone (out of time, stopping); it may be tried again."""


class ReadersPending(Exception):
    """A reader still holds an index snapshot older than the repoint: the old log stays until
    ``recover`` (next pass or start) can delete it; no other log may start meanwhile."""


@dataclasses.dataclass
class Outcome:
    log_id: int
    new_log_id: int
    copied_bytes: int  # entry bytes written to the new log
    reclaimed_bytes: int  # file size of the old log minus that of the new one
    entries: int
    repoint_s: float = 0.0  # the longest one of step 4's write transactions held the index's writer


def get_state(index: Index) -> dict | None:
    with index.begin() as txn:
        return index.compaction_state(txn)


def skipped_logs(index: Index) -> set[int]:
    with index.begin() as txn:
        return index.compaction_skipped(txn)


def _set_state(index: Index, state: dict | None, skip: int | None = None) -> None:
    with index.begin(write=True) as txn:
        index.set_compaction_state(txn, state)
        if skip is not None:
            index.skip_compaction(txn, skip)
    index.sync()


def live_entries(index: Index, log_id: int) -> list[tuple[int, StoredLedger, np.ndarray]]:
    """What ``log_id`` holds of live ledgers: [(ledger_id, the ledger's state, rows)], rows an
    int64 array of (entry_id, offset, length) in offset order (empty for a ledger of the map
    whose only bytes here are FENCE or LAC records).  One read snapshot."""
    out = []
    with index.begin() as txn:
        ledgers = sorted(index.log_map(txn, log_id) or ())
        for ledger_id in ledgers:
            rec = index.get_ledger(txn, ledger_id)
            if rec is None and index.is_deleted(txn, ledger_id):
                continue  # deleted: nothing of it is live
            # no record but not deleted: entries an older bookie indexed after dropping the
            # record are live all the same (core/ledgers.py invariant 9); copied unbound
            info = StoredLedger.from_dict(rec) if rec is not None else StoredLedger(b"")
            rows = index.locations_in_log(txn, ledger_id, log_id)
            arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
            if rec is None and not len(arr):
                continue
            out.append((ledger_id, info, arr[np.argsort(arr[:, 1])]))
    return out


def wait_for_readers(index: Index, txn_id: int, timeout_s: float, stopping=lambda: False) -> bool:
    """True once no LMDB reader holds a snapshot older than write transaction ``txn_id``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if not index.has_reader_older_than(txn_id):
            return True
        if time.monotonic() >= deadline or stopping():
            return False
        time.sleep(0.01)


def _unlink_log(ledger_dirs: list[str], log_id: int) -> int:
    """Unlink a log if it exists, fsync its directory; returns the bytes it took (0 if gone)."""
    try:
        path = find_log(ledger_dirs, log_id)
    except FileNotFoundError:
        return 0
    size = os.stat(path).st_blocks * 512
    os.unlink(path)
    fsync_dir(os.path.dirname(path))
    return size


def recover(index: Index, ledger_dirs: list[str], stopping=lambda: False) -> str:
    """Finish or undo the step a crash interrupted; returns what was done ("" for nothing)."""
    state = get_state(index)
    if state is None:
        return ""
    if state["state"] == "copying":
        _unlink_log(ledger_dirs, state["new"])
        with index.begin(write=True) as txn:
            index.drop_log_map(txn, state["new"])  # never written before step 4
        _set_state(index, None)
        return f"undone: copy of {log_name(state['old'])} into {log_name(state['new'])}"
    if state["state"] == "repointing":  # new is synced and partly pointed to: roll forward
        state["txn"], _ = _repoint(index, state["old"], state["new"],
                                   _items_from_log(ledger_dirs, state["new"]))
    if not wait_for_readers(index, state["txn"], READERS_WAIT_S, stopping):
        return ""  # tried again at the next pass
    _unlink_log(ledger_dirs, state["old"])
    _set_state(index, None)
    return f"finished: {log_name(state['old'])} deleted, its entries are in {log_name(state['new'])}"


def compact_log(index: Index, ledger_dirs: list[str], log_id: int, throttle: Throttle,
                deadline: float | None = None, stopping=lambda: False, crash=lambda step: None,
                sleep=time.sleep) -> Outcome:
    """Rewrite one log's live entries into a new log and delete it (module docstring).

    ``crash(step)`` is called after each durable step (tests kill the process there).

    Raises:
        CorruptEntry: the rewrite was undone and the log is skipped from now on.
        Abandoned: out of time or stopping; the rewrite was undone.
        ReadersPending: done but for deleting the old log (``recover`` finishes it).
        OSError: a disk error (ENOSPC included); the rewrite was undone if it could be.
    """
    directory = os.path.dirname(find_log(ledger_dirs, log_id))
    ledgers = live_entries(index, log_id)
    new_id = index.allocate_log_id(ledger_dirs)
    _set_state(index, {"old": log_id, "new": new_id, "state": "copying"})
    crash("intent")
    moves = []  # (ledger_id, rows, new offsets)
    copied = entries = 0
    try:
        old_fd = os.open(find_log(ledger_dirs, log_id), os.O_RDONLY)
        new_fd = create_log(directory, new_id)
        try:
            crash("created")
            pos = LOG_HEADER_SIZE
            unsynced = 0
            for ledger_id, info, rows in ledgers:
                placed = info.copy_binding()  # core/ledgers.py: the copies bind as the ledger is
                for start in range(0, len(rows), RECORD_MAX_ENTRIES):
                    chunk = rows[start:start + RECORD_MAX_ENTRIES]
                    # also bound a record's size (entries may be large)
                    ends = np.cumsum(chunk[:, 2])
                    cut = max(1, int(np.searchsorted(ends, RECORD_MAX_BYTES, side="right")))
                    for part in (chunk[:cut], chunk[cut:]) if cut < len(chunk) else (chunk,):
                        if not len(part):
                            continue
                        if stopping():
                            raise Abandoned("stopping")
                        if deadline is not None and time.monotonic() >= deadline:
                            raise Abandoned("out of time")
                        data = _read_entries(old_fd, log_id, ledger_id, part)
                        lengths = part[:, 2].astype(LENGTHS_DTYPE).tobytes()
                        parts, size, data_offset = records.add_batch_parts(
                            ledger_id, placed.key, lengths, data, flags=placed.flags)
                        blob = b"".join(parts)
                        n = os.pwrite(new_fd, blob, pos)
                        if n != len(blob):
                            raise OSError(f"short write to {log_name(new_id)}")
                        offs = pos + data_offset + np.cumsum(part[:, 2]) - part[:, 2]
                        moves.append((ledger_id, part, offs))
                        pos += size
                        copied += len(data)
                        unsynced += size
                        if unsynced >= SYNC_EVERY_BYTES:  # no single big flush at step 3: the
                            os.fdatasync(new_fd)  # journal shares the disk (foreground latency)
                            unsynced = 0
                        entries += len(part)
                        wait = throttle.wait_s(len(data) if throttle.by_bytes else len(part))
                        if wait > 0:
                            sleep(wait)
                    crash("copying")
                if not len(rows):
                    # no entry of it here (its copies were dropped: core/ledgers.py invariant 9):
                    # an ADD_BATCH of no entries carries its binding, which no copy does now
                    parts, size, _ = records.add_batch_parts(ledger_id, placed.key, b"", b"",
                                                             flags=placed.flags)
                    blob = b"".join(parts)
                    if os.pwrite(new_fd, blob, pos) != len(blob):
                        raise OSError(f"short write to {log_name(new_id)}")
                    moves.append((ledger_id, None, size))
                    pos += size
                # the ledger's fence and explicit LAC, restated: a rebuild from the new log
                # alone must not lose them (core/ledgers.py invariants 4 and 5)
                for rtype, state, lac in info.state_records():
                    rec = (records.fence_record(ledger_id, state.key, state.flags) if rtype == records.FENCE
                           else records.lac_record(ledger_id, lac, state.key, state.flags))
                    if os.pwrite(new_fd, rec, pos) != len(rec):
                        raise OSError(f"short write to {log_name(new_id)}")
                    moves.append((ledger_id, None, len(rec)))
                    pos += len(rec)
            os.fdatasync(new_fd)
            crash("synced")
            new_size = os.fstat(new_fd).st_blocks * 512
        finally:
            os.close(new_fd)
            os.close(old_fd)
    except BaseException:
        _undo(index, ledger_dirs, log_id, new_id)
        raise
    txn_id, repoint_s = _repoint(index, log_id, new_id, _items(moves, new_id), crash)
    crash("repointed")
    if not wait_for_readers(index, txn_id, READERS_WAIT_S, stopping):
        raise ReadersPending(f"{log_name(log_id)} repointed into {log_name(new_id)}; deleted "
                             f"once no reader holds an older index snapshot")
    old_size = _unlink_log(ledger_dirs, log_id)
    crash("deleted")
    _set_state(index, None)
    return Outcome(log_id, new_id, copied, max(0, old_size - new_size), entries, repoint_s)


def _read_entries(fd: int, log_id: int, ledger_id: int, rows: np.ndarray) -> bytes:
    """The entries at ``rows`` (entry_id, offset, length), checked against their index keys."""
    first = int(rows[0, 1])
    last_end = int(rows[-1, 1] + rows[-1, 2])
    if last_end - first <= 2 * int(rows[:, 2].sum()) + 65536:
        blob = os.pread(fd, last_end - first, first)
        pieces = [blob[int(o) - first:int(o) - first + int(ln)] for _, o, ln in rows]
    else:
        pieces = [os.pread(fd, int(ln), int(o)) for _, o, ln in rows]
    for (eid, off, ln), piece in zip(rows, pieces):
        if len(piece) != ln:
            raise CorruptEntry(log_id, ledger_id, int(eid), int(off), "cut short")
        if ln < ENTRY_HEADER.size:
            raise CorruptEntry(log_id, ledger_id, int(eid), int(off), "shorter than an entry header")
        lid, e, _, _ = ENTRY_HEADER.unpack_from(piece, 0)
        if lid != ledger_id or e != eid:
            raise CorruptEntry(log_id, ledger_id, int(eid), int(off),
                               f"its header says ledger {lid} entry {e}")
    return b"".join(pieces)


def _repoint(index: Index, log_id: int, new_id: int, items, crash=lambda step: None) -> tuple[int, float]:
    """Step 4: point every entry still in ``old`` into ``new`` (compare-and-set on the log id:
    ``old`` is never written again, so an entry whose location names it is the one copied).

    ``items``: [(ledger_id, entry_id or None, offset in new, length)], None for a FENCE, LAC or
    binding record (bytes of the ledger in new's map).  Batches of REPOINT_BATCH_ENTRIES
    entries, one write transaction each (each holds the index's one writer, which the add
    worker's commits wait for), the first one recording the state "repointing"; the last
    transaction writes new's map, removes old's and records "repointed".
    Returns that last transaction's id (readers older than it may still read ``old``) and
    the longest any of them held the writer (seconds).
    """
    state = {"old": log_id, "new": new_id, "state": "repointing"}
    counts: dict[int, int] = {}
    longest = 0.0
    for start in range(0, len(items), REPOINT_BATCH_ENTRIES):
        t0 = time.monotonic()
        batch = items[start:start + REPOINT_BATCH_ENTRIES]
        with index.begin(write=True) as txn:
            if start == 0:
                index.set_compaction_state(txn, state)
            moves = [item for item in batch if item[1] is not None]
            moved = iter(index.move_locations(txn, log_id, new_id, moves))
            for ledger_id, entry_id, _, ln in batch:
                # a record's bytes always count; an entry's when the index now places it in new
                if entry_id is None or next(moved):
                    counts[ledger_id] = counts.get(ledger_id, 0) + ln
        longest = max(longest, time.monotonic() - t0)
        if start == 0:
            crash("repointing")
    with index.begin(write=True) as txn:
        index.put_log_map(txn, new_id, counts)
        index.drop_log_map(txn, log_id)
        txn_id = txn.id()
        index.set_compaction_state(txn, {**state, "state": "repointed", "txn": txn_id})
    index.sync()
    return txn_id, longest


def _items(moves, new_id: int) -> list:
    """Repoint items of the entries copied: (ledger_id, entry_id, offset in new, length)."""
    out = []
    for ledger_id, rows, offs in moves:
        if rows is None:  # a restated FENCE, LAC or binding record of ``offs`` bytes
            out.append((ledger_id, None, None, offs))
            continue
        out += [(ledger_id, eid, new_off, ln)
                for (eid, _, ln), new_off in zip(rows.tolist(), offs.tolist())]
    return out


def _items_from_log(ledger_dirs: list[str], new_id: int) -> list:
    """The repoint items of a synced new log, read back from its own records (recovery of an
    interrupted step 4: the moves are not kept anywhere else)."""
    with open(find_log(ledger_dirs, new_id), "rb") as f:
        buf = f.read()
    out = []
    for pos, rec in records.iter_records(buf, LOG_HEADER_SIZE):
        if rec.type != records.ADD_BATCH or not len(rec.lengths):
            out.append((rec.ledger_id, None, None, rec.size))
            continue
        off = pos + rec.data_offset
        for ln in rec.lengths.tolist():
            _, eid, _, _ = ENTRY_HEADER.unpack_from(buf, off)
            out.append((rec.ledger_id, eid, off, ln))
            off += ln
    return out


def _undo(index: Index, ledger_dirs: list[str], log_id: int, new_id: int) -> None:
    try:
        _unlink_log(ledger_dirs, new_id)
        _set_state(index, None)
    except Exception:  # noqa: BLE001 - recover() finishes the undo at the next pass
        pass


def skip(index: Index, log_id: int) -> None:
    """Never try this log again (it holds a corrupt entry)."""
    _set_state(index, get_state(index), skip=log_id)


def held_ledgers(index: Index) -> tuple[list[int], dict, set]:
    """One snapshot: (held ledger ids, log maps, current logs).  Held: named by a record or by
    an indexed entry, and not deleted (``bookie.core.ledgers.held``, invariant 9)."""
    with index.begin() as txn:
        recorded = set(index.ledger_ids(txn))
        indexed = set(index.indexed_ledger_ids(txn))
        held = [lid for lid in sorted(recorded | indexed)
                if ledger_rules.held(lid in recorded, lid in indexed, index.is_deleted(txn, lid))]
        return held, index.log_maps(txn), index.current_logs(txn)

