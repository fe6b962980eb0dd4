"""The embedded store's LMDB environment: its databases, their records, and who holds a handle.

Named databases of the environment (``data.mdb`` in the directory of the URI):

    nodes    node key -> <q version><Q lease id, 0 = persistent> data
             node key = parent path ("" for the root) + NUL + name, so the children of a node
             are one contiguous key range, without its grandchildren
    owned    <Q lease id> + node key -> ""            the ephemeral nodes of each lease
    leases   <Q lease id> -> <16s boot id><q deadline, CLOCK_MONOTONIC ns>
    ledgers  >Q ledger id (big-endian, so keys sort by id) -> <q version> record
    meta     "next_ledger_id", "next_lease_id" -> <Q>;  "seq" + parent key -> <Q>

A store exists at a directory once ``data.mdb`` is there and the ``/LAYOUT`` node is in
``nodes`` (written by ``metaformat``, or by ``open_metadata(..., create=True)``).

Handles: LMDB allows one open environment per file per process, and a handle must never cross
``fork()``; ``Environments`` keeps that rule for every store of the process.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import uuid
from typing import Iterator

import lmdb

from bookie.metadata.errors import MetadataError

DATA_FILE = "data.mdb"
DATABASES = ("nodes", "owned", "leases", "ledgers", "meta")

NODE = struct.Struct("<qQ")         # version, lease id (0: persistent); the data follows
LEASE = struct.Struct("<16sq")      # boot id, deadline in CLOCK_MONOTONIC ns
U64 = struct.Struct("<Q")
ID_KEY = struct.Struct(">Q")        # ledger and lease ids as keys: big-endian sorts by id
VERSION = struct.Struct("<q")       # a ledger record's version; the record follows


def node_key(path: str) -> bytes:
    """The ``nodes`` key of a node path (b"" for the root)."""
    if path == "/":
        return b""
    parent, _, name = path.rpartition("/")
    return parent.encode() + b"\x00" + name.encode()


def children_prefix(path: str) -> bytes:
    """The key prefix shared by the children of ``path``, and by no other node."""
    return (b"" if path == "/" else path.encode()) + b"\x00"


def boot_id() -> bytes:
    """This host's boot id (16 bytes; zeros if the kernel does not say): a lease taken before
    a reboot is dead whatever its deadline says, since CLOCK_MONOTONIC restarted."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return bytes(16)


class NotAStoreError(MetadataError):
    """The LMDB environment at a path is another program's (its main database holds more than
    the store's databases), or lacks the store's databases when they may not be created;
    nothing was written to it."""


class Environments:
    """The process's open LMDB environments, one per directory, and the fork rule for them.

    LMDB allows one open environment per file per process (py-lmdb refuses a second), so every
    store of a process on the same directory shares one handle, counted by ``acquire`` /
    ``release``.  A handle must never cross ``fork()``, and closing an inherited one in the child
    is not safe either: it frees reader slots that the parent still uses.  So just before any
    fork, once no transaction of ours is in progress (new ones wait), every environment is
    closed in the parent; parent and child reopen lazily on their next transaction.
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork,
                                after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0           # transactions in progress
        self._forking = False
        self._entries: dict[str, list] = {}   # realpath -> [env or None, dbs, store count, map size]

    def acquire(self, path: str, map_size: int, create: bool = True) -> str:
        """Take a share of the environment at ``path``, opening it if this process has none.

        Args:
            create: make the store's databases if the environment lacks them; without it, such
                an environment is refused (``NotAStoreError``) and left as it was.  Another
                program's environment is refused either way.
        Returns:
            The environment's key (the directory's real path): what ``transaction`` takes.
        Raises:
            MetadataError: LMDB cannot open it (the share is not taken).
        """
        with self._lock:
            key = os.path.realpath(path)
            entry = self._entries.setdefault(key, [None, None, 0, map_size])
            try:
                self._open(path, entry, create)
            except MetadataError:
                if entry[2] == 0:
                    del self._entries[key]
                raise
            entry[2] += 1
            return key

    def release(self, path: str) -> None:
        """Give back a share; the last one closes the handle."""
        with self._lock:
            key = os.path.realpath(path)
            entry = self._entries.get(key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] <= 0:
                del self._entries[key]
                if entry[0] is not None:
                    entry[0].close()

    @staticmethod
    def _open(path: str, entry: list, create: bool = True) -> None:
        # After the first open (a reopen after fork), the databases exist: ``create`` changes
        # nothing then.
        if entry[0] is not None:
            return
        try:
            env = lmdb.open(path, subdir=True, map_size=entry[3], max_dbs=8, max_readers=1024,
                            lock=True, sync=True, metasync=True, mode=0o600)
        except lmdb.Error as e:
            raise MetadataError(f"cannot open the metadata store at {path}: {e}") from None
        try:
            with env.begin() as txn:  # the main database names the named ones, and holds no more
                foreign = any(key.decode(errors="replace") not in DATABASES
                              for key in txn.cursor().iternext(values=False))
            if foreign:
                raise lmdb.NotFoundError("another program's environment")
            dbs = {name: env.open_db(name.encode(), create=create) for name in DATABASES}
        except lmdb.NotFoundError:
            env.close()
            raise NotAStoreError(f"{path}: the LMDB environment there holds no metadata "
                                 f"store") from None
        env.reader_check()  # free the reader slots of processes that died
        entry[0], entry[1] = env, dbs

    @contextlib.contextmanager
    def transaction(self, key: str, write: bool) -> Iterator[tuple[lmdb.Transaction, dict]]:
        """One LMDB transaction on the environment whose key ``acquire`` returned (resolving
        the path on every transaction cost three ``lstat`` calls), with its named databases."""
        with self._lock:
            while self._forking:
                self._idle.wait()
            entry = self._entries.get(key)
            if entry is None:
                raise MetadataError("metadata store is closed")
            self._open(key, entry)
            env, dbs = entry[0], entry[1]
            self._active += 1
        try:
            with env.begin(write=write) as txn:
                yield txn, dbs
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._idle.notify_all()

    def _before_fork(self) -> None:
        self._lock.acquire()  # held across the fork; released in the parent, reset in the child
        self._forking = True
        while self._active:
            self._idle.wait()
        for entry in self._entries.values():
            if entry[0] is not None:
                entry[0].close()
                entry[0] = entry[1] = None

    def _after_fork(self) -> None:
        self._forking = False
        self._idle.notify_all()
        self._lock.release()


ENVIRONMENTS = Environments()
