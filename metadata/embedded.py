"""The embedded metadata store: one LMDB environment shared by every process on a host.

Theory of operation.  Every read is an LMDB read transaction and every change one short write
transaction, so versions and compare-and-swap are exactly as strong as LMDB's single writer:
two processes racing on a version both read it inside their own write transaction, and the
second sees the first's result.  LMDB commits are crash-safe (copy-on-write pages, then a synced
meta page), so a process killed at any instant leaves either the whole transaction or none of
it; a killed process's write lock and reader slot are reclaimed by LMDB (robust mutexes,
``reader_check`` on open).

The databases and their records are specified in ``embedded_env``; ephemeral nodes belong to
leases, the stand-in for ZooKeeper sessions, whose rules are in ``embedded_leases``.

A store is opened only where one was created: ``data.mdb`` present and ``/LAYOUT`` written.
Opening any other directory raises ``NoSuchStoreError`` and leaves the file system as it was;
``create=True`` (``metaformat``, ``localbookie``) makes the directory and initialises it.

Watches are polled: one thread per store reads every watched key in one read transaction every
``watch_poll_s`` (default 0.1 s) and calls back on differences, so a change is delivered within
about one poll interval plus the time earlier callbacks take.

Environments are opened lazily in the process that uses them, and again after a fork (the
child never touches the parent's handle, threads, lease or watches).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

import lmdb

from bookie.metadata.embedded_env import (
    DATA_FILE, ENVIRONMENTS, ID_KEY, NODE, U64, VERSION, NotAStoreError, boot_id, children_prefix,
    node_key)
from bookie.metadata.access import access_problem
from bookie.metadata.embedded_leases import LeaseRules, next_counter
from bookie.metadata.errors import (
    AccessDeniedError, BadVersionError, CorruptMetadataError, MetadataError, NodeExistsError,
    NoSuchLedgerError, NoSuchNodeError, NoSuchStoreError, NotEmptyError)
from bookie.metadata.ledger import LedgerMetadata
from bookie.metadata.store import (
    LAYOUT, Cancel, MetadataStore, Watch, check_path)

log = logging.getLogger(__name__)

_RANGE_CHUNK = 1000


def _ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` below the root, top first."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


class EmbeddedMetadataStore(MetadataStore):
    """The metadata store in an LMDB environment at ``path`` (see the module docstring)."""

    def __init__(self, path: str, timeout_s: float = 10.0, *, lease_ms: int = 5000,
                 watch_poll_s: float = 0.1, map_size_bytes: int = 1 << 30,
                 clock_ns: Callable[[], int] = time.monotonic_ns, create: bool = False):
        """Open the store in directory ``path``.

        Args:
            create: make the directory and initialise the store if there is none; without it,
                a directory holding no initialised store is refused and left untouched.
        Raises:
            NoSuchStoreError: no store at ``path`` and ``create`` is False.
            MetadataError: the directory or the environment cannot be used.
        """
        super().__init__(timeout_s)
        if lease_ms < 50:
            raise ValueError(f"lease_ms must be >= 50, got {lease_ms}")
        self.path = path
        self.lease_ms = int(lease_ms)
        self.watch_poll_s = float(watch_poll_s)
        self._map_size = int(map_size_bytes)
        self._leases = LeaseRules(boot_id(), self.lease_ms, clock_ns)
        self._pid = -1
        self._env_key = ""  # ENVIRONMENTS' key for this process's share (set by _environment)
        self._dbs: dict = {}
        self._closed = False
        if not create and not os.path.isfile(os.path.join(path, DATA_FILE)):
            # Checked before LMDB opens anything: opening would create the file.
            _refuse_if_not_ours(path)  # a store of another user is not a missing one
            raise NoSuchStoreError(f"lmdb://{path}", "no metadata store in that directory")
        if create:
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)  # the bookie user's alone
            except OSError as e:
                raise MetadataError(f"cannot create the metadata directory {path}: {e}") from None
        self._reset_process_state()
        try:
            self._environment(create)  # fail now, not on first use, if it is unusable
        except NotAStoreError:
            if create:  # never written into: it is someone else's data
                raise MetadataError(f"lmdb://{path}: the LMDB environment in that directory "
                                    f"holds no metadata store but other data; choose another "
                                    f"directory") from None
            raise NoSuchStoreError(f"lmdb://{path}", "the LMDB environment in that directory "
                                   "is not a metadata store") from None
        try:
            if create:
                self._initialise()
            elif self.exists(LAYOUT) is None:
                raise NoSuchStoreError(f"lmdb://{path}", "the store there was never initialised")
        except BaseException:
            self.close()
            raise

    # -- process-local state -----------------------------------------------------------------

    def _reset_process_state(self) -> None:
        self._session_lock = threading.RLock()
        self._lease_id = 0
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._watches: list[list] = []  # [watch, probe, last state]
        self._watch_lock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._registrations = []
        self._registrations_lock = threading.Lock()

    def _environment(self, create: bool = True) -> None:
        """Take this process's share of the environment (again after a fork)."""
        if self._closed:
            raise MetadataError("metadata store is closed")
        if self._pid != os.getpid():
            if self._pid != -1:
                # A forked child: the parent's threads, lease and watches are not ours.
                self._reset_process_state()
            self._env_key = ENVIRONMENTS.acquire(self.path, self._map_size, create)
            self._pid = os.getpid()

    def _run(self, fn: Callable[[lmdb.Transaction], Any], write: bool) -> Any:
        self._environment()
        try:
            with ENVIRONMENTS.transaction(self._env_key, write) as (txn, dbs):
                self._dbs = dbs  # the same handles for every thread until the next fork
                return fn(txn)
        except lmdb.MapFullError:
            raise MetadataError(f"metadata store {self.path} is full (map size "
                                f"{self._map_size} bytes)") from None
        except lmdb.Error as e:
            raise MetadataError(f"metadata store {self.path}: {e}") from None

    def _write(self, fn: Callable[[lmdb.Transaction], Any]) -> Any:
        return self._run(fn, write=True)

    def _read(self, fn: Callable[[lmdb.Transaction], Any]) -> Any:
        return self._run(fn, write=False)

    # -- the lease (this process's session) --------------------------------------------------

    def _session(self) -> int:
        """This process's lease id, taking a lease (and starting its renewal) if needed."""
        self._environment()
        with self._session_lock:
            if self._lease_id == 0:
                self._lease_id = self._write(lambda txn: self._leases.take(txn, self._dbs))
                if self._renewer is None:
                    self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                                     name=f"metadata-lease[{os.getpid()}]")
                    self._renewer.start()
            return self._lease_id

    def _renew_loop(self) -> None:
        interval_s = max(self.lease_ms / 4000.0, 0.02)
        while not self._stop.wait(interval_s):
            try:
                lost = self._renew_once()
            except MetadataError as e:
                log.warning("renewing metadata lease: %s", e)
                continue
            if lost:
                log.warning("metadata lease expired before renewal; registering again")
                self._reassert_registrations()

    def _renew_once(self) -> bool:
        """Extend our lease; return True if it had expired (and a new one was taken)."""
        with self._session_lock:
            if self._lease_id == 0:
                return False
            self._lease_id, lost = self._write(
                lambda txn: self._leases.renew(txn, self._dbs, self._lease_id))
            return lost

    # -- node helpers (inside a transaction) -------------------------------------------------

    def _live(self, txn: lmdb.Transaction, key: bytes) -> tuple[int, int, bytes] | None:
        """``(version, lease_id, data)`` of a node that exists and is not expired."""
        if key == b"":
            return (0, 0, b"")
        raw = txn.get(key, db=self._dbs["nodes"])
        if raw is None:
            return None
        version, lease_id = NODE.unpack_from(raw)
        if lease_id and not self._leases.alive(txn, self._dbs, lease_id):
            return None
        return version, lease_id, bytes(raw[NODE.size:])

    def _put_node(self, txn: lmdb.Transaction, key: bytes, version: int, lease_id: int,
                  data: bytes) -> None:
        txn.put(key, NODE.pack(version, lease_id) + data, db=self._dbs["nodes"])
        if lease_id:
            txn.put(ID_KEY.pack(lease_id) + key, b"", db=self._dbs["owned"])

    def _del_node(self, txn: lmdb.Transaction, key: bytes) -> None:
        raw = txn.get(key, db=self._dbs["nodes"])
        if raw is None:
            return
        lease_id = NODE.unpack_from(raw)[1]
        if lease_id:
            txn.delete(ID_KEY.pack(lease_id) + key, db=self._dbs["owned"])
        txn.delete(key, db=self._dbs["nodes"])

    def _child_names(self, txn: lmdb.Transaction, path: str) -> list[str]:
        prefix = children_prefix(path)
        names = []
        cursor = txn.cursor(db=self._dbs["nodes"])
        if cursor.set_range(prefix):
            for key in cursor.iternext(values=False):
                if not key.startswith(prefix):
                    break
                if self._live(txn, key) is not None:
                    names.append(key[len(prefix):].decode())
        return names

    def _make_parents(self, txn: lmdb.Transaction, path: str) -> None:
        for ancestor in _ancestors(path):
            key = node_key(ancestor)
            node = self._live(txn, key)
            if node is None:
                self._del_node(txn, key)  # an expired ephemeral, if anything
                self._put_node(txn, key, 0, 0, b"")
            elif node[1]:
                raise MetadataError(f"{ancestor} is ephemeral and cannot have children "
                                    f"(creating {path})")

    # -- generic nodes -----------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
               sequential: bool = False) -> str:
        check_path(path)
        if path == "/":
            raise NodeExistsError("/ always exists")
        lease_id = self._session() if ephemeral else 0
        data = bytes(data)

        def op(txn):
            self._make_parents(txn, path)
            final = path
            if sequential:
                parent = path.rpartition("/")[0] or "/"
                final = path + "%010d" % next_counter(txn, self._dbs, b"seq" + children_prefix(parent))
            key = node_key(final)
            if self._live(txn, key) is not None:
                raise NodeExistsError(f"node {final} already exists")
            self._del_node(txn, key)
            self._put_node(txn, key, 0, lease_id, data)
            return final
        return self._write(op)

    def get(self, path: str) -> tuple[bytes, int]:
        check_path(path)
        node = self._read(lambda txn: self._live(txn, node_key(path)))
        if node is None:
            raise NoSuchNodeError(f"no node {path}")
        return node[2], node[0]

    def exists(self, path: str) -> int | None:
        check_path(path)
        node = self._read(lambda txn: self._live(txn, node_key(path)))
        return None if node is None else node[0]

    def _node_at_version(self, txn, path: str, version: int | None):
        """(key, node) of a live node whose version is ``version`` (any, when None): the CAS
        precondition of set and delete.  Raises NoSuchNodeError, BadVersionError."""
        key = node_key(path)
        node = self._live(txn, key)
        if node is None or key == b"":
            raise NoSuchNodeError(f"no node {path}")
        if version is not None and node[0] != version:
            raise BadVersionError(f"{path}: version is {node[0]}, not {version}")
        return key, node

    def set(self, path: str, data: bytes, version: int | None) -> int:
        check_path(path)
        data = bytes(data)

        def op(txn):
            key, node = self._node_at_version(txn, path, version)
            self._put_node(txn, key, node[0] + 1, node[1], data)
            return node[0] + 1
        return self._write(op)

    def delete(self, path: str, version: int | None = None) -> None:
        check_path(path)

        def op(txn):
            key, node = self._node_at_version(txn, path, version)
            if self._child_names(txn, path):
                raise NotEmptyError(f"{path} has children")
            self._del_node(txn, key)
        self._write(op)

    def children(self, path: str) -> list[str]:
        check_path(path)

        def op(txn):
            if self._live(txn, node_key(path)) is None:
                raise NoSuchNodeError(f"no node {path}")
            return sorted(self._child_names(txn, path))
        return self._read(op)

    # -- session plumbing --------------------------------------------------------------------

    def _claim_ephemeral(self, path: str, data: bytes) -> bool:
        lease_id = self._session()

        def op(txn):
            key = node_key(path)
            node = self._live(txn, key)
            if node is not None and node[1] != lease_id:
                return False
            self._make_parents(txn, path)
            self._del_node(txn, key)
            self._put_node(txn, key, node[0] + 1 if node else 0, lease_id, data)
            return True
        return self._write(op)

    def _move_ephemeral(self, old: str, new: str, data: bytes) -> None:
        lease_id = self._session()

        def op(txn):
            new_key = node_key(new)
            node = self._live(txn, new_key)
            if node is not None and node[1] != lease_id:
                raise NodeExistsError(f"node {new} is held by another session")
            old_node = self._live(txn, node_key(old))
            if old_node is not None and old_node[1] == lease_id:
                self._del_node(txn, node_key(old))
            self._make_parents(txn, new)
            self._del_node(txn, new_key)
            self._put_node(txn, new_key, 0, lease_id, data)
        self._write(op)

    def _wipe(self) -> None:
        def op(txn):
            for name in ("nodes", "owned", "ledgers"):
                txn.drop(self._dbs[name], delete=False)
        self._write(op)

    def _write_layout(self) -> None:
        def op(txn):
            key = node_key(LAYOUT)
            if self._live(txn, key) is None:
                self._put_node(txn, key, 0, 0, b'{"layout":"lmdb","format_version":1}')
        self._write(op)

    # -- ledgers -----------------------------------------------------------------------------

    @staticmethod
    def _ledger_key(ledger_id: int) -> bytes:
        if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) \
                or not 0 <= ledger_id < 1 << 63:
            raise NoSuchLedgerError(ledger_id)
        return ID_KEY.pack(ledger_id)

    def create_ledger(self, meta: LedgerMetadata) -> tuple[int, int]:
        record = meta.to_bytes()

        def op(txn):
            ledger_id = next_counter(txn, self._dbs, b"next_ledger_id")
            txn.put(ID_KEY.pack(ledger_id), VERSION.pack(0) + record,
                    db=self._dbs["ledgers"])
            return ledger_id
        return self._write(op), 0

    def ledger_id_high_water(self) -> int:
        # ``next_ledger_id`` is the id the next create takes (counted from 0, one write
        # transaction per create), so everything handed out so far is below it.
        raw = self._read(lambda txn: txn.get(b"next_ledger_id", db=self._dbs["meta"]))
        return (U64.unpack(raw)[0] if raw is not None else 0) - 1

    def _ledger_record(self, txn: lmdb.Transaction, ledger_id: int) -> tuple[int, bytes] | None:
        raw = txn.get(self._ledger_key(ledger_id), db=self._dbs["ledgers"])
        if raw is None:
            return None
        return VERSION.unpack_from(raw)[0], bytes(raw[VERSION.size:])

    def read_ledger(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        record = self._read(lambda txn: self._ledger_record(txn, ledger_id))
        if record is None:
            raise NoSuchLedgerError(ledger_id)
        return LedgerMetadata.from_bytes(record[1], what=f"ledger {ledger_id}"), record[0]

    def write_ledger(self, ledger_id: int, meta: LedgerMetadata, version: int) -> int:
        data = meta.to_bytes()

        def op(txn):
            record = self._ledger_record(txn, ledger_id)
            if record is None:
                raise NoSuchLedgerError(ledger_id)
            if record[0] != version:
                raise BadVersionError(f"ledger {ledger_id}: version is {record[0]}, not {version}")
            txn.put(ID_KEY.pack(ledger_id), VERSION.pack(version + 1) + data,
                    db=self._dbs["ledgers"])
            return version + 1
        return self._write(op)

    def remove_ledger(self, ledger_id: int, version: int | None = None) -> None:
        def op(txn):
            record = self._ledger_record(txn, ledger_id)
            if record is None:
                raise NoSuchLedgerError(ledger_id)
            if version is not None and record[0] != version:
                raise BadVersionError(f"ledger {ledger_id}: version is {record[0]}, not {version}")
            txn.delete(ID_KEY.pack(ledger_id), db=self._dbs["ledgers"])
        self._write(op)

    def _write_raw_ledger(self, ledger_id: int, data: bytes) -> None:
        def op(txn):
            record = self._ledger_record(txn, ledger_id)
            version = record[0] + 1 if record else 0
            txn.put(ID_KEY.pack(ledger_id), VERSION.pack(version) + bytes(data),
                    db=self._dbs["ledgers"])
        self._write(op)

    def ledger_ranges(self) -> Iterator[list[int]]:
        # Short read transactions, one per chunk: a long-lived reader would keep LMDB from
        # reusing pages while a GC scan walks a large store.
        after = -1
        while True:
            def chunk(txn, start=after + 1):
                cursor = txn.cursor(db=self._dbs["ledgers"])
                ids: list[int] = []
                if cursor.set_range(ID_KEY.pack(start)):
                    for key in cursor.iternext(values=False):
                        ids.append(ID_KEY.unpack(key)[0])
                        if len(ids) == _RANGE_CHUNK:
                            break
                return ids
            ids = self._read(chunk)
            if not ids:
                return
            yield ids
            after = ids[-1]

    def list_ledgers(self) -> Iterator[int]:
        for ids in self.ledger_ranges():
            yield from ids

    # -- watches -----------------------------------------------------------------------------

    def _add_watch(self, probe: Callable[[lmdb.Transaction], Any],
                   deliver: Callable[[Any], None]) -> Cancel:
        baseline = self._read(probe)
        watch = Watch(deliver, on_cancel=self._remove_watch)
        with self._watch_lock:
            self._watches.append([watch, probe, baseline])
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, daemon=True,
                                                name=f"metadata-watch[{os.getpid()}]")
                self._poller.start()
        return watch.cancel

    def _remove_watch(self, watch: Watch) -> None:
        with self._watch_lock:
            self._watches = [w for w in self._watches if w[0] is not watch]

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.watch_poll_s):
            with self._watch_lock:
                watches = list(self._watches)
            if not watches:
                continue
            try:
                states = self._read(lambda txn: [entry[1](txn) for entry in watches])
            except MetadataError as e:
                log.warning("polling metadata watches: %s", e)
                continue
            changed = []
            for entry, state in zip(watches, states):
                if state != entry[2]:
                    entry[2] = state  # only this thread touches the last-seen state
                    changed.append((entry[0], state))
            for watch, state in changed:
                try:
                    watch.deliver(state)
                except Exception:
                    log.exception("metadata watch callback failed")

    def watch_node(self, path: str, callback: Callable[[bytes | None, int], None]) -> Cancel:
        check_path(path)
        key = node_key(path)

        def probe(txn):
            node = self._live(txn, key)
            return None if node is None else (node[0], node[1], node[2])

        def deliver(state):
            callback(None, -1) if state is None else callback(state[2], state[0])
        return self._add_watch(probe, deliver)

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Cancel:
        check_path(path)
        return self._add_watch(lambda txn: tuple(sorted(self._child_names(txn, path))),
                               lambda state: callback(list(state)))

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[LedgerMetadata | None, int], None]) -> Cancel:
        self._ledger_key(ledger_id)

        def deliver(record):
            if record is None:
                callback(None, -1)
                return
            try:
                meta = LedgerMetadata.from_bytes(record[1], what=f"ledger {ledger_id}")
            except CorruptMetadataError as e:
                log.warning("watch: %s", e)
                return
            callback(meta, record[0])
        return self._add_watch(lambda txn: self._ledger_record(txn, ledger_id), deliver)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        if self._pid == os.getpid():
            super().close()
            self._stop.set()
            for thread in (self._renewer, self._poller):
                if thread is not None and thread is not threading.current_thread():
                    thread.join(2.0)
            with self._session_lock:
                if self._lease_id:
                    lease_id, self._lease_id = self._lease_id, 0
                    try:
                        self._write(lambda txn: self._leases.drop(txn, self._dbs, lease_id))
                    except MetadataError as e:
                        log.warning("dropping metadata lease on close: %s", e)
            ENVIRONMENTS.release(self.path)
        self._closed = True


def _refuse_if_not_ours(path: str) -> None:
    """Raise ``AccessDeniedError`` when ``path`` exists but this user may not enter it (the
    bookie's store, 0700, opened by another user), or a directory above it hides it: named as a
    permission problem, with the user to run as, rather than as a store that does not exist."""
    problem = access_problem(path)
    if problem:
        raise AccessDeniedError(f"lmdb://{path}: {problem}")
