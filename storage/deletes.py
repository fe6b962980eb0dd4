"""The bookie's durable list of deleted ledgers: what the GC deleted stays deleted.

The index holds a tombstone for each ledger the GC deleted (``Index.delete_ledger``), but the
index is a cache: when it is lost and rebuilt from the entry logs, the logs may still hold the
deleted ledger's entries (until compaction or the GC removes their logs).  So before the GC
writes a tombstone it appends the ledger's id here and syncs it; a rebuild marks every id listed
here deleted before it applies a single record (``bookie.core.ledgers`` invariant 6).

Format: file ``deleted-ledgers`` in the first ledger directory's ``current/``: ledger ids as
u64 little-endian, appended, each append fdatasynced (and the directory fsynced when the file is
new).  A crash can leave a tail of fewer than 8 bytes: it is ignored (that id's tombstone was not
written either, and the next GC pass deletes it again).  Ledger ids are never reused, so the
list only grows, by 8 bytes per deleted ledger.
"""

from __future__ import annotations

import os
import struct

from bookie.storage.journal import fsync_dir

FILE_NAME = "deleted-ledgers"
_ID = struct.Struct("<Q")


def path_of(ledger_dir: str) -> str:
    """The list's path in a ledger directory's ``current/``."""
    return os.path.join(ledger_dir, FILE_NAME)


def append(ledger_dir: str, ledger_ids) -> None:
    """Append ``ledger_ids`` durably (returns after fdatasync)."""
    ids = list(ledger_ids)
    if not ids:
        return
    path = path_of(ledger_dir)
    new = not os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size % _ID.size:  # a torn tail from a crash: cut it, so ids stay aligned
            os.ftruncate(fd, size - size % _ID.size)
        os.write(fd, b"".join(_ID.pack(i) for i in ids))
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(ledger_dir)


def read(ledger_dir: str) -> set[int]:
    """Every id in the list (empty when there is none)."""
    try:
        with open(path_of(ledger_dir), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return set()
    whole = len(raw) - len(raw) % _ID.size
    return {i for (i,) in _ID.iter_unpack(raw[:whole])}


def delete_ledgers(index, ledger_dirs: list[str], ledger_ids, batch_entries: int = 10_000) -> None:
    """Delete ledgers for good: their ids on the durable list first (synced), then each leaves
    the index in short write transactions (a tombstone, its entries, its record), so the add
    worker's commits keep flowing between them.  ``index``: a ``bookie.storage.index.Index``."""
    ids = list(ledger_ids)
    append(ledger_dirs[0], ids)
    for ledger_id in ids:
        while True:
            with index.begin(write=True) as txn:
                n = index.delete_ledger(txn, ledger_id, batch_entries)
            if n < batch_entries:
                break
