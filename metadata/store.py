"""The metadata store contract, and what both backends share on top of it.

Theory of operation.  A store is a tree of nodes, as in ZooKeeper: every node has a path relative
to the store's root ("/available/127.0.0.1:3181"), bytes of data, and a version that starts at 0
and grows by one with every successful ``set``.  Writes that name a version are compare-and-swap:
they succeed only if the node still has that version.  Ephemeral nodes belong to the store's
*session* (a ZooKeeper session, or a lease in the embedded store) and vanish when it ends.
Ledger metadata is kept beside the tree by each backend in its own layout, with the same version
rules, and its ids are allocated by the backend.

On top of those primitives this module defines, once for both backends:

* bookie membership: ``{root}/available/{bookie_id}`` for writable bookies and
  ``{root}/available/readonly/{bookie_id}`` for read-only ones, ephemeral, with the bookie's info
  dict as JSON data.  A ``BookieRegistration`` re-creates its node whenever the store starts a new
  session, so a bookie comes back after an expired session without anyone asking;
* cookies: ``{root}/cookies/{bookie_id}``, persistent, versioned;
* watch delivery: callbacks run on one thread per store, in the order the changes were seen,
  never on the caller's thread and never while a lock of the store is held.  Changes that come
  quickly may be coalesced: a callback always gets the latest state, not every intermediate one.
"""

from __future__ import annotations

import abc
import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import orjson

from bookie.metadata.errors import (
    CookieNotFoundError, MetadataTimeoutError, NodeExistsError, NoSuchLedgerError, NoSuchNodeError)
from bookie.metadata.ledger import LedgerMetadata

log = logging.getLogger(__name__)

AVAILABLE = "/available"
READONLY = "/available/readonly"
COOKIES = "/cookies"
LAYOUT = "/LAYOUT"
INSTANCEID = "/INSTANCEID"
RECOVERYSECRET = "/RECOVERYSECRET"  # metadata/recovery_secret.py: no user data by itself
UNDERREPLICATION = "/underreplication"
# Under /underreplication only the marks and the lost-data reports are cluster data (format
# refuses to wipe them silently); the election, locks and flags belong to running autorecovery
# workers (metadata/underreplication.py).
UNDERREPLICATION_MARKS = UNDERREPLICATION + "/ledgers"
UNDERREPLICATION_LOST = UNDERREPLICATION + "/lost"
# Nodes format() creates; a root holding nothing else (and no ledgers) has no data to lose.
SKELETON = (AVAILABLE, READONLY, COOKIES, UNDERREPLICATION)

Cancel = Callable[[], None]


def join(parent: str, name: str) -> str:
    return ("" if parent == "/" else parent) + "/" + name


def check_path(path: str) -> str:
    """Return ``path`` if it is a node path ("/" or "/a/b"); raise ``ValueError`` otherwise."""
    if not isinstance(path, str) or not path.startswith("/") or (path != "/" and (
            path.endswith("/") or "//" in path or "\x00" in path)):
        raise ValueError(f"{path!r} is not a node path (absolute, no trailing or double slash)")
    return path


def check_bookie_id(bookie_id: str) -> str:
    if not isinstance(bookie_id, str) or not bookie_id or "/" in bookie_id \
            or bookie_id in ("readonly", ".", ".."):
        raise ValueError(f"{bookie_id!r} is not a bookie id (host:port, or a bookieId)")
    return bookie_id


class Dispatcher:
    """One daemon thread that runs watch callbacks in order, so a slow or failing callback
    delays only other callbacks of the same store and never the store's own threads."""

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self._queue.put((fn, args))

    def stop(self, timeout_s: float = 2.0) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:  # a user's callback must not kill the delivery thread
                log.exception("metadata watch callback %r failed", fn)


class Watch:
    """A cancellable subscription: ``deliver`` forwards to the callback until cancelled."""

    def __init__(self, callback: Callable[..., Any], on_cancel: Callable[["Watch"], None] | None = None):
        self._callback = callback
        self._on_cancel = on_cancel
        self.cancelled = False

    def deliver(self, *args: Any) -> None:
        if not self.cancelled:
            self._callback(*args)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self._on_cancel is not None:
                self._on_cancel(self)


class BookieRegistration:
    """A bookie's presence in the store, kept alive by the store's session.

    While open, exactly one of ``available/{id}`` and ``available/readonly/{id}`` is held by this
    registration.  After the store's session is lost and a new one starts, the node is created
    again (the store calls ``reassert``).  ``close`` removes it at once.
    """

    def __init__(self, store: "MetadataStore", bookie_id: str, readonly: bool, info: dict):
        self._store = store
        self.bookie_id = check_bookie_id(bookie_id)
        self.readonly = bool(readonly)
        self.info = dict(info)
        self.closed = False
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return join(READONLY if self.readonly else AVAILABLE, self.bookie_id)

    def _data(self) -> bytes:
        return orjson.dumps(self.info)

    def reassert(self) -> None:
        """Make sure our node exists and is ours; waits (up to the store's timeout) for a node
        left by another, dead session to expire.  Raises ``NodeExistsError`` if a live session
        of someone else keeps holding it."""
        with self._lock:
            if self.closed:
                return
            deadline = time.monotonic() + self._store.timeout_s
            while not self._store._claim_ephemeral(self.path, self._data()):
                if time.monotonic() >= deadline:
                    raise NodeExistsError(
                        f"bookie {self.bookie_id} is already registered by another live process "
                        f"({self.path})")
                time.sleep(0.05)

    def set_readonly(self, flag: bool) -> None:
        """Move the registration to the read-only list (True) or back to writable (False), in
        one atomic step where the backend allows it, so watchers never see the bookie vanish."""
        with self._lock:
            if self.closed:
                raise NodeExistsError(f"registration of {self.bookie_id} is closed")
            flag = bool(flag)
            if flag == self.readonly:
                return
            old = self.path
            self.readonly = flag
            try:
                self._store._move_ephemeral(old, self.path, self._data())
            except BaseException:
                # Not moved, or not known to be: say so, so that the caller's retry moves it
                # (a move that did happen is finished by the retry's two-step path).
                self.readonly = not flag
                raise

    def close(self) -> None:
        """Unregister now (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._store._forget_registration(self)
        try:
            self._store.delete(self.path)
        except NoSuchNodeError:
            pass

    def __enter__(self) -> "BookieRegistration":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class MetadataStore(abc.ABC):
    """Ledger metadata, bookie membership, cookies and generic versioned nodes.

    Open one with ``open_metadata(uri)``.  Every call returns or raises within ``timeout_s``.
    A store may be used from many threads.  It is also a context manager (``close`` on exit).
    """

    timeout_s: float

    def __init__(self, timeout_s: float):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self._registrations: list[BookieRegistration] = []
        self._registrations_lock = threading.Lock()

    # -- generic nodes (backend) -------------------------------------------------------------

    @abc.abstractmethod
    def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
               sequential: bool = False) -> str:
        """Create a node (and any missing parents, persistent and empty); return its path.

        ``sequential`` appends a 10-digit counter, increasing per parent, to the name.
        ``ephemeral`` ties the node to this store's session.
        Raises ``NodeExistsError`` if the node is there, ``MetadataError`` if a parent is
        ephemeral (ephemeral nodes have no children)."""

    @abc.abstractmethod
    def get(self, path: str) -> tuple[bytes, int]:
        """Return ``(data, version)``; ``NoSuchNodeError`` if absent."""

    @abc.abstractmethod
    def set(self, path: str, data: bytes, version: int | None) -> int:
        """Replace the data if the version is ``version`` (None: any); return the new version.
        Raises ``BadVersionError``, ``NoSuchNodeError``."""

    @abc.abstractmethod
    def delete(self, path: str, version: int | None = None) -> None:
        """Delete the node if its version is ``version`` (None: any).  Raises
        ``BadVersionError``, ``NoSuchNodeError``, ``NotEmptyError`` (it has children)."""

    @abc.abstractmethod
    def exists(self, path: str) -> int | None:
        """The node's version, or None if there is no such node."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names of the node's children, sorted; ``NoSuchNodeError`` if absent."""

    @abc.abstractmethod
    def watch_node(self, path: str, callback: Callable[[bytes | None, int], None]) -> Cancel:
        """Call ``callback(data_or_None, version)`` whenever the node changes, is created or is
        deleted (data None, version -1) after this call; return a function that cancels."""

    @abc.abstractmethod
    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Cancel:
        """Call ``callback(sorted_children)`` whenever the node's set of children changes after
        this call (a missing node counts as having none); return a function that cancels."""

    # -- ledgers (backend) -------------------------------------------------------------------

    @abc.abstractmethod
    def create_ledger(self, meta: LedgerMetadata) -> tuple[int, int]:
        """Store ``meta`` under a new ledger id, unique in this store forever; return
        ``(ledger_id, version)``."""

    @abc.abstractmethod
    def ledger_id_high_water(self) -> int:
        """An id at or above every ledger id this store has handed out so far (-1: none yet);
        ``create_ledger`` never hands out an id at or below a value read earlier.  Cheap: one
        read.  It may overshoot (ids skipped are never handed out), never undershoot: the GC
        takes an id above it for one never created (``bookie.core.gc_policy``)."""

    @abc.abstractmethod
    def read_ledger(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """Return ``(meta, version)``.  Raises ``NoSuchLedgerError``, ``CorruptMetadataError``
        (message names the ledger)."""

    def ledger_exists(self, ledger_id: int) -> bool:
        """Whether the store still holds the ledger (``read_ledger`` without the metadata)."""
        try:
            self.read_ledger(ledger_id)
            return True
        except NoSuchLedgerError:
            return False

    def read_ledger_latest(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """``read_ledger`` once this store's view has caught up with every write made anywhere
        before the call (ZooKeeper: a sync first, as a follower may lag the leader; a store on
        one host is never behind)."""
        return self.read_ledger(ledger_id)

    @abc.abstractmethod
    def write_ledger(self, ledger_id: int, meta: LedgerMetadata, version: int) -> int:
        """Replace the metadata if its version is still ``version``; return the new version.
        Raises ``BadVersionError``, ``NoSuchLedgerError``."""

    @abc.abstractmethod
    def remove_ledger(self, ledger_id: int, version: int | None = None) -> None:
        """Remove the metadata if its version is ``version`` (None: any).  Raises
        ``BadVersionError``, ``NoSuchLedgerError``."""

    @abc.abstractmethod
    def list_ledgers(self) -> Iterator[int]:
        """Every ledger id, ascending.  Ledgers created or removed during the iteration may or
        may not be seen."""

    @abc.abstractmethod
    def ledger_ranges(self) -> Iterator[list[int]]:
        """The ledger ids in ascending, non-overlapping chunks (for scan-and-compare GC)."""

    @abc.abstractmethod
    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[LedgerMetadata | None, int], None]) -> Cancel:
        """Call ``callback(meta, version)`` after each change of the ledger's metadata, and
        ``callback(None, -1)`` once it is removed; return a function that cancels."""

    @abc.abstractmethod
    def _write_raw_ledger(self, ledger_id: int, data: bytes) -> None:
        """Store raw bytes as a ledger's record, unchecked (tests and repair tools only)."""

    # -- session plumbing (backend) ----------------------------------------------------------

    @abc.abstractmethod
    def _claim_ephemeral(self, path: str, data: bytes) -> bool:
        """Create the ephemeral node for this session, or take it over if this session already
        owns it (set data).  Return False if a live session of someone else owns it."""

    @abc.abstractmethod
    def _move_ephemeral(self, old: str, new: str, data: bytes) -> None:
        """Create ephemeral ``new`` and delete ``old`` (if present), atomically if possible."""

    @abc.abstractmethod
    def _wipe(self) -> None:
        """Delete every node and ledger of this store (format --force)."""

    @abc.abstractmethod
    def _write_layout(self) -> None:
        """(Re)write the layout marker after a wipe."""

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Unregister this store's bookies, stop its threads and release its connection."""
        with self._registrations_lock:
            registrations = list(self._registrations)
        for registration in registrations:
            try:
                registration.close()
            except Exception as e:  # closing must get through every registration
                log.warning("unregistering %s on close: %s", registration.bookie_id, e)

    def __enter__(self) -> "MetadataStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- format ------------------------------------------------------------------------------

    def has_data(self) -> bool:
        """True if the store holds ledgers, cookies, registrations or nodes beyond the skeleton
        that ``format`` creates."""
        if next(iter(self.list_ledgers()), None) is not None:
            return True
        for path in (AVAILABLE, READONLY, COOKIES, UNDERREPLICATION_MARKS, UNDERREPLICATION_LOST):
            try:
                kids = self.children(path)
            except NoSuchNodeError:
                continue
            if path == AVAILABLE:
                kids = [k for k in kids if k != "readonly"]
            if kids:
                return True
        try:
            top = self.children("/")
        except NoSuchNodeError:
            return False
        known = {p.strip("/").split("/")[0] for p in SKELETON + (LAYOUT, INSTANCEID, RECOVERYSECRET,
                                                                   "/PRIVATE")}
        # "HW-...": the flat ZooKeeper layout's ledger_id_high_water node, there for a moment
        return any(name not in known and not name.isdigit() and name != "idgen"
                   and not name.startswith("HW-") for name in top)

    def format(self, force: bool = False) -> None:
        """Initialise the cluster metadata (BookKeeper's ``metaformat``).

        Without ``force``, raises ``NodeExistsError`` if the store holds data (``has_data``);
        with ``force``, wipes everything first.  Ledger ids are never reused after a wipe by the
        embedded store; ZooKeeper's sequence restarts with the wiped root."""
        if self.has_data():
            if not force:
                raise NodeExistsError("the metadata store already holds data; format with force "
                                      "to wipe it")
            self._wipe()
        self._initialise()

    def _initialise(self) -> None:
        """Write what makes this an initialised store (layout marker, skeleton nodes, instance
        id), keeping whatever is there already; safe to repeat and to race with another
        process doing the same.  ``open_metadata`` refuses a store without the layout marker."""
        self._write_layout()
        for path in SKELETON:
            try:
                self.create(path)
            except NodeExistsError:
                pass
        try:
            self.create(INSTANCEID, str(uuid.uuid4()).encode())
        except NodeExistsError:
            pass

    def instance_id(self) -> str | None:
        try:
            return self.get(INSTANCEID)[0].decode()
        except NoSuchNodeError:
            return None

    # -- bookies -----------------------------------------------------------------------------

    def register_bookie(self, bookie_id: str, readonly: bool = False,
                        info: dict | None = None) -> BookieRegistration:
        """Register a bookie as available (writable) or read-only, for as long as this store's
        session lives (ZooKeeper: ephemeral node; embedded: lease renewed by a thread).  If
        another live process holds the registration, waits up to ``timeout_s`` for it to go, then
        raises ``NodeExistsError``."""
        registration = BookieRegistration(self, bookie_id, readonly, info or {})
        registration.reassert()
        with self._registrations_lock:
            self._registrations.append(registration)
        return registration

    def _forget_registration(self, registration: BookieRegistration) -> None:
        with self._registrations_lock:
            if registration in self._registrations:
                self._registrations.remove(registration)

    def _reassert_registrations(self) -> None:
        """Called by the backend when a new session starts: put every registration back."""
        with self._registrations_lock:
            registrations = list(self._registrations)
        for registration in registrations:
            try:
                registration.reassert()
            except Exception as e:
                log.warning("re-registering bookie %s failed: %s", registration.bookie_id, e)

    def list_bookies(self, readonly: bool = False) -> list[str]:
        """Registered bookie ids, sorted: writable ones, or read-only ones with ``readonly``."""
        try:
            kids = self.children(READONLY if readonly else AVAILABLE)
        except NoSuchNodeError:
            return []
        return sorted(k for k in kids if readonly or k != "readonly")

    def registered_bookies(self) -> set[str]:
        """Every registered bookie, writable or read-only."""
        return set(self.list_bookies()) | set(self.list_bookies(readonly=True))

    def bookie_info(self, bookie_id: str) -> dict | None:
        """The info dict a registered bookie published, or None if it is not registered."""
        check_bookie_id(bookie_id)
        for parent in (AVAILABLE, READONLY):
            try:
                data, _ = self.get(join(parent, bookie_id))
            except NoSuchNodeError:
                continue
            try:
                info = orjson.loads(data) if data else {}
            except orjson.JSONDecodeError:
                return {}
            return info if isinstance(info, dict) else {}
        return None

    def watch_bookies(self, callback: Callable[[list[str], list[str]], None]) -> Cancel:
        """Call ``callback(writable, readonly)`` (sorted lists) whenever membership changes after
        this call; return a function that cancels."""
        state: dict[str, list[str] | None] = {"writable": None, "readonly": None}
        lock = threading.Lock()

        def changed(kind: str, kids: list[str]) -> None:
            with lock:
                state[kind] = sorted(k for k in kids if k != "readonly")
                if state["writable"] is None or state["readonly"] is None:
                    return
                pair = (list(state["writable"]), list(state["readonly"]))
            callback(*pair)

        # The first state of each list is the baseline (not delivered); take it from a read so
        # that a later change of either list reports both lists correctly.
        state["writable"] = self.list_bookies()
        state["readonly"] = self.list_bookies(readonly=True)
        cancels = [self.watch_children(AVAILABLE, lambda kids: changed("writable", kids)),
                   self.watch_children(READONLY, lambda kids: changed("readonly", kids))]

        def cancel() -> None:
            for c in cancels:
                c()
        return cancel

    # -- cookies -----------------------------------------------------------------------------

    def read_cookie(self, bookie_id: str) -> tuple[bytes, int]:
        """Return ``(data, version)`` of the bookie's cookie; ``CookieNotFoundError`` if none."""
        try:
            return self.get(join(COOKIES, check_bookie_id(bookie_id)))
        except NoSuchNodeError:
            raise CookieNotFoundError(bookie_id) from None

    def write_cookie(self, bookie_id: str, data: bytes, version: int | None = None) -> int:
        """Create the cookie (``version`` None; ``NodeExistsError`` if one exists) or replace it
        if its version is ``version`` (``BadVersionError``); return the new version."""
        path = join(COOKIES, check_bookie_id(bookie_id))
        if version is None:
            self.create(path, bytes(data))
            return 0
        try:
            return self.set(path, bytes(data), version)
        except NoSuchNodeError:
            raise CookieNotFoundError(bookie_id) from None

    def remove_cookie(self, bookie_id: str, version: int | None = None) -> None:
        try:
            self.delete(join(COOKIES, check_bookie_id(bookie_id)), version)
        except NoSuchNodeError:
            raise CookieNotFoundError(bookie_id) from None


def deadline_after(timeout_s: float) -> float:
    return time.monotonic() + timeout_s


def remaining(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise MetadataTimeoutError(f"{what}: timed out")
    return left
