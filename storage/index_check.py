"""The index is a cache of the entry logs: the cheap check at start-up.

The whole theory (what the index holds, how it is found again) is in bookie.storage.index_rebuild.
The check at start-up (``check_index``) is cheap: one cursor step per ledger and a few bytes of
each log's indexed tail (the furthest of the ledgers' last entries in it), not a scan; deeper
damage is ``bookie.storage.index_verify``'s to find.  It refuses (one line naming the fix) when
the index is missing while entry logs hold data, cannot be opened, points at a log that is
missing, past the end of a log, or at bytes that are not the entry it names.  (BookKeeper refuses
a missing index too, rather than rebuilding behind the operator's back.)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

import lmdb

from bookie import wire
from bookie.storage.inspect import (
    IndexUnreadable, in_child, index_path,
    ledger_dirs_of, log_paths, open_index_readonly)
from bookie.storage.index import Index
from bookie.storage.entrylog import log_name


REBUILD_HINT = "bookie shell rebuild-index --conf FILE"
MAX_OPEN_LOGS = 128
_IDS = struct.Struct(">qq")

Progress = Callable[[str, int, int, int], None]  # (phase, done, total, entries)


# ---- the check at start-up ---------------------------------------------------------------------

def check_index(conf) -> str | None:
    """Check the index against the entry logs' tails and the logs' maps (fast: no scan), in a
    child process (``in_child``).

    Returns:
        None when they agree, else one line saying what disagrees and naming the fix.
    """
    try:
        problem = in_child(lambda: _index_problem(conf), f"the index {index_path(conf)}")
    except IndexUnreadable as e:
        problem = str(e)
    if problem is None:
        return None
    return f"{problem}; the index is a cache of the entry logs: rebuild it with '{REBUILD_HINT}'"


def _index_problem(conf) -> str | None:
    logs = dict(log_paths(ledger_dirs_of(conf)))
    try:
        env, index = open_index_readonly(conf)
    except IndexUnreadable as e:
        if "does not exist" in str(e) and not logs:
            return None  # a new bookie: the add worker creates the index
        if "does not exist" in str(e):
            return f"{e}, but {len(logs)} entry logs hold data"
        return str(e)
    files: dict[int, int] = {}
    try:
        with index.begin() as txn:
            return _tails_problem(index, txn, logs, files) or _maps_problem(index, txn, logs)
    except lmdb.Error as e:
        return f"the index {index_path(conf)} is damaged: {e}"
    finally:
        for fd in files.values():
            os.close(fd)
        env.close()


def _located_entry_problem(ledger_id: int, entry_id: int, loc, logs: dict[int, str],
                           files: dict[int, int]) -> str | None:
    log_id, offset, length = loc
    path = logs.get(log_id)
    if path is None:
        return (f"ledger {ledger_id} entry {entry_id} is indexed in entry log {log_name(log_id)}, "
                f"which is missing")
    fd = files.get(log_id)
    if fd is None:
        if len(files) >= MAX_OPEN_LOGS:  # a big bookie has more logs than a process has fds
            os.close(files.pop(next(iter(files))))
        fd = files[log_id] = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    if offset + length > size or length < wire.ENTRY_HEADER_SIZE:
        return (f"ledger {ledger_id} entry {entry_id} is indexed at {log_name(log_id)} offset "
                f"{offset} (+{length} bytes), past the end of that {size}-byte file")
    head = os.pread(fd, 16, offset)
    if _IDS.unpack(head) != (ledger_id, entry_id):
        got = _IDS.unpack(head)
        return (f"ledger {ledger_id} entry {entry_id} is indexed at {log_name(log_id)} offset "
                f"{offset}, but ledger {got[0]} entry {got[1]} lies there")
    return None


def _tails_problem(index: Index, txn, logs: dict[int, str], files: dict[int, int]) -> str | None:
    """Each log's indexed tail lies inside the log and is the entry the index says.

    The tail of a log is the furthest of the ledgers' last entries that lie in it: one cursor
    step per ledger (the index's pages), then one read per log (the disks): cheap on a bookie
    with many ledgers and a cold page cache.
    """
    tails: dict[int, tuple[int, int, tuple[int, int, int]]] = {}  # log -> (ledger, entry, loc)
    for ledger_id in index.ledger_ids(txn):
        last = index.last_entry(txn, ledger_id)
        if last is None:
            continue
        entry_id, loc = last
        held = tails.get(loc[0])
        if held is None or loc[1] + loc[2] > held[2][1] + held[2][2]:
            tails[loc[0]] = (ledger_id, entry_id, loc)
    for ledger_id, entry_id, loc in tails.values():
        problem = _located_entry_problem(ledger_id, entry_id, loc, logs, files)
        if problem:
            return problem
    return None


def _maps_problem(index: Index, txn, logs: dict[int, str]) -> str | None:
    """A ledger map of a missing log is a GC or compaction leftover only when no live ledger of
    it still has its first or last entry indexed in that log."""
    for log_id, ledgers in index.log_maps(txn).items():
        if log_id in logs:
            continue
        for ledger_id in ledgers:
            if index.get_ledger(txn, ledger_id) is None:
                continue  # deleted (or never recorded): the map is the GC's leftover
            ends = [index.locate(txn, ledger_id, 0), index.last_entry(txn, ledger_id)]
            for loc in ends:
                if loc is not None and (loc[0] if len(loc) == 3 else loc[1][0]) == log_id:
                    return (f"the index maps ledger {ledger_id} to entry log {log_name(log_id)}, "
                            f"which is missing")
    return None


# ---- rebuild -----------------------------------------------------------------------------------
