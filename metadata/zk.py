"""The ZooKeeper metadata store (kazoo), for clusters of hosts.

Theory of operation.  All nodes live under the root of the URI (default ``/ledgers``); node
versions are ZooKeeper's, so compare-and-swap is ZooKeeper's.  Ledger metadata is laid out as
BookKeeper lays it out, chosen by the URI scheme and remembered in ``{root}/LAYOUT``:

    flat           {root}/L{id:010d}, created as a sequential node under the root, so the id
                   is ZooKeeper's sequence number for the root
    hierarchical   {root}/{2 digits}/{4 digits}/L{4 digits} of the 10-digit id, the id taken
                   from an ephemeral sequential node {root}/idgen/ID-{seq} that is deleted at once

Every call is asynchronous underneath and waited for with the store's ``timeout_s``.  While the
connection is down kazoo queues requests until it reconnects; a request that was in flight when
the connection dropped is retried within the same deadline when retrying is safe (reads,
creates of a known path, versioned sets and deletes: a retry that then meets "exists", "bad
version" or "no node" checks whether the data is already what we wrote).  A sequential create
that was in flight has an unknown outcome and raises ``ConnectionLossError``.

Bookie registrations are ephemeral nodes.  When the session expires ZooKeeper deletes them;
kazoo then opens a new session and this store re-creates them (``BookieRegistration.reassert``).
Watches use kazoo's DataWatch / ChildrenWatch, which survive reconnects and session loss; their
callbacks are handed to this store's delivery thread.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Callable, Iterator

import orjson
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from bookie.metadata.errors import (
    AccessDeniedError, BadVersionError, ConnectionLossError, CorruptMetadataError, MetadataError,
    MetadataTimeoutError, NodeExistsError, NoSuchLedgerError, NoSuchNodeError, NoSuchStoreError)
from bookie.metadata.ledger import LedgerMetadata
from bookie.metadata.store import (
    AVAILABLE, INSTANCEID, LAYOUT, READONLY, Cancel, Dispatcher, MetadataStore, Watch, check_path)
from bookie.metadata.uri import MetadataUri
from bookie.metadata.zk_acl import (
    BOOKIES_WRITE_PARENTS, REGISTRATIONS, ZkSecurity, _ids, above_root_acl, acl_for, child_acl, listed,
    read_only_entry, refused_with, root_acl_problem)
from bookie.metadata.zk_errors import map_error

log = logging.getLogger(__name__)

_RETRYABLE = (kz.ConnectionLoss, kz.OperationTimeoutError, kz.SessionExpiredError)
_FLAT_NAME = re.compile(r"^L(\d{10})$")
HIGH_WATER_PREFIX = "HW-"  # flat layout: the sequential node ledger_id_high_water takes and drops
_L1 = re.compile(r"^\d{2}$")
_L2 = re.compile(r"^\d{4}$")
_L3 = re.compile(r"^L(\d{4})$")
_MAX_ZK_ID = 9_999_999_999
_RANGE_CHUNK = 1000


class ZooKeeperMetadataStore(MetadataStore):
    """The metadata store in a ZooKeeper ensemble (see the module docstring)."""

    def __init__(self, uri: MetadataUri, timeout_s: float = 10.0, *,
                 session_timeout_s: float | None = None, create: bool = False,
                 security: ZkSecurity | None = None):
        """Connect and check the root.

        Args:
            create: initialise the root (layout from the URI, default hierarchical) if it holds
                no store; without it, a root never formatted is refused and left untouched.
            security: credentials to authenticate with, and (``enabled``) the ACL every node
                created under the root gets (zk_acl.py); None: none, open ACL.
        Raises:
            NoSuchStoreError: the root holds no ``LAYOUT`` record and ``create`` is False.
            MetadataTimeoutError: ZooKeeper cannot be reached within ``timeout_s``.
            AccessDeniedError: the root's ACL does not fit ``security`` (``root_acl_problem``).
        """
        super().__init__(timeout_s)
        self.uri = uri
        self.root = uri.root
        self.hosts = ",".join(uri.hosts)
        self.session_timeout_s = float(session_timeout_s or timeout_s)
        self.security = security
        self._closed = False
        self._pid = -1
        self._client_obj: KazooClient | None = None
        self._zk()  # connect now: an unreachable server is an error at open, within timeout_s
        try:
            self._check_root_acl()
            self.layout = self._resolve_layout(uri.layout, create)
            if create:
                self._initialise()
            self._check_bookie_acls()
        except BaseException:
            self.close()  # do not leave a connected client behind a failed open
            raise

    # -- connection --------------------------------------------------------------------------

    def _zk(self) -> KazooClient:
        """This process's client; a forked child connects anew (kazoo is not fork-safe)."""
        if self._closed:
            raise MetadataError("metadata store is closed")
        if self._pid != os.getpid():
            if self._pid != -1:
                self._registrations = []
                self._registrations_lock = threading.Lock()
            self._dispatcher = Dispatcher(f"metadata-watch[{os.getpid()}]")
            client = KazooClient(
                hosts=self.hosts, timeout=self.session_timeout_s,
                connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
                command_retry=None, auth_data=self.security and self.security.auth_data,
                default_acl=self.security and self.security.acl)
            client.add_listener(self._on_state)
            try:
                client.start(timeout=self.timeout_s)
            except client.handler.timeout_exception:
                try:
                    client.stop()
                    client.close()
                except Exception:
                    pass
                self._dispatcher.stop()
                raise MetadataTimeoutError(
                    f"cannot reach ZooKeeper at {self.hosts} within {self.timeout_s:g} s") from None
            self._client_obj = client
            self._pid = os.getpid()
        assert self._client_obj is not None
        return self._client_obj

    @property
    def client(self) -> KazooClient:
        """The kazoo client of this process (for tests and tools: expire, drop, inspect)."""
        return self._zk()

    def session_id(self) -> int | None:
        client_id = self._zk().client_id
        return client_id[0] if client_id else None

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread: no blocking calls here.  Re-registering after every reconnect
        # is cheap (a claim of a node we still own is a no-op) and covers expired sessions.
        if state == KazooState.CONNECTED and not self._closed:
            threading.Thread(target=self._reassert_registrations, daemon=True,
                             name="metadata-reregister").start()

    def _abs(self, path: str) -> str:
        check_path(path)
        return self.root if path == "/" else self.root + path

    def _run(self, what: str, make: Callable[[KazooClient], Any],
             after_loss: Callable[[Exception], Any] | None = None) -> Any:
        """Run one asynchronous kazoo call to completion within ``timeout_s``.

        ``make(client)`` starts the call and returns its async result.  Connection trouble is
        retried until the deadline; a ZooKeeper error after such a retry goes to
        ``after_loss(error)``, which returns the call's result if the earlier attempt did take
        effect or raises.  Errors come out as ``MetadataError`` subclasses."""
        client = self._zk()
        deadline = time.monotonic() + self.timeout_s
        lost = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise MetadataTimeoutError(
                    f"{what}: no answer from ZooKeeper at {self.hosts} within "
                    f"{self.timeout_s:g} s")
            try:
                return make(client).get(timeout=left)
            except client.handler.timeout_exception:
                continue  # the deadline check above raises
            except _RETRYABLE:
                lost = True
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            except kz.KazooException as e:
                if lost and after_loss is not None and not isinstance(e, _RETRYABLE):
                    try:
                        return after_loss(e)
                    except kz.KazooException as e2:
                        raise map_error(e2, what) from None
                raise map_error(e, what) from None

    def _stat(self, abs_path: str) -> tuple[bytes, Any] | None:
        try:
            return self._run(abs_path, lambda c: c.get_async(abs_path))
        except NoSuchNodeError:
            return None

    # -- generic nodes -----------------------------------------------------------------------

    def _create_abs(self, abs_path: str, data: bytes, ephemeral: bool = False,
                    sequential: bool = False) -> str:
        """Create a node, and its missing parents (persistent, empty) if the first try says
        they are missing."""
        data = bytes(data)

        def after_loss(e: Exception) -> str:
            if sequential:
                raise ConnectionLossError(
                    f"connection lost while creating {abs_path}: it may or may not exist")
            if isinstance(e, kz.NodeExistsError):
                found = self._stat(abs_path)
                mine = found is not None and found[0] == data and (
                    not ephemeral or found[1].ephemeralOwner == self.session_id())
                if mine:
                    return abs_path
            raise e

        acl = self._acl(abs_path)

        def attempt() -> str:
            return self._run(abs_path, lambda c: c.create_async(
                abs_path, data, acl=acl, ephemeral=ephemeral, sequence=sequential), after_loss)
        try:
            return attempt()
        except NoSuchNodeError:
            self._ensure_parents(abs_path)
            return attempt()

    def _ensure_parents(self, abs_path: str) -> None:
        parts = abs_path.strip("/").split("/")[:-1]
        for i in range(len(parts)):
            node = "/" + "/".join(parts[:i + 1])
            acl = above_root_acl() if self.root.startswith(node + "/") else self._acl(node)
            try:
                self._run(node, lambda c, n=node, a=acl: c.create_async(n, b"", acl=a))
            except NodeExistsError:
                pass

    def _acl(self, abs_path: str):
        """The ACL of a node made at ``abs_path`` (zk_acl.acl_for; None: the client's default)."""
        if not abs_path.startswith(self.root + "/"):
            return None
        return acl_for(abs_path[len(self.root):], self.security)

    def _check_bookie_acls(self) -> None:
        """A bookie (security on, zkBookieDigestAuthFile) puts the bookies-only ACL on the
        parents of registrations, cookies and locations where a client or an older version
        made them with the cluster's: otherwise any client could create or delete children.
        Their existing children too (zk_acl.py, ``child_acl``): each one not written with the
        bookies-only ACL is named in one warning line."""
        want = self.security.bookies_only_acl if self.security else None
        if want is None:
            return
        for top in BOOKIES_WRITE_PARENTS:
            node = self.root + top
            try:
                acls, _ = self._run(node, lambda c, n=node: c.get_acls_async(n))
                if _ids(acls) != _ids(want):
                    self._run(node, lambda c, n=node: c.set_acls_async(n, want))
                    log.info("ACL of %s set to the bookies' principal only", node)
                kids = self._children_abs(node)
            except NoSuchNodeError:
                continue  # made with the right ACL when first needed
            except AccessDeniedError as e:
                log.warning("cannot give %s to the bookies' principal alone (%s)", node, e)
                continue
            for kid in kids:
                if top == "/available" and kid == "readonly":
                    continue  # a parent of its own
                self._check_child_acl(top, f"{node}/{kid}", want)

    def _check_child_acl(self, top: str, path: str, want) -> None:
        fix = child_acl(top, self.security)
        try:
            acls, _ = self._run(path, lambda c: c.get_acls_async(path))
            if _ids(acls) in (_ids(want), _ids(fix)):
                return
            self._run(path, lambda c: c.set_acls_async(path, fix))
        except NoSuchNodeError:
            return  # gone meanwhile (an ephemeral registration)
        except AccessDeniedError as e:
            log.warning("cannot give %s to the bookies' principal alone (%s)", path, e)
            return
        kind = "registration" if top in REGISTRATIONS else top.strip("/")[:-1]
        log.warning("%s %s was not written by the bookies' principal (made before "
                    "zkBookieDigestAuthFile, or by a client): %s", kind, path,
                    "no longer listed, clients ignore it" if top in REGISTRATIONS else
                    "now the bookies' alone to change; check it")

    def list_bookies(self, readonly: bool = False) -> list[str]:
        """As the store lists them, without a registration a bookie's principal did not write
        (zk_acl.py ``listed``: under a bookies-only parent, a child with another ACL)."""
        ids = super().list_bookies(readonly)
        parent = self.root + (READONLY if readonly else AVAILABLE)
        try:
            parent_acls, _ = self._run(parent, lambda c: c.get_acls_async(parent))
        except (NoSuchNodeError, AccessDeniedError):
            return ids
        if not read_only_entry(parent_acls):
            return ids  # no bookies' principal: nothing to tell apart
        out = []
        for bookie_id in ids:
            path = f"{parent}/{bookie_id}"
            try:
                acls, _ = self._run(path, lambda c, p=path: c.get_acls_async(p))
            except (NoSuchNodeError, AccessDeniedError):
                acls = None
            if listed(parent_acls, acls):
                out.append(bookie_id)
        return out

    def _check_root_acl(self) -> None:
        """Refuse (``AccessDeniedError``) a root whose ACL does not fit ``self.security``."""
        try:
            acls, _stat = self._run(self.root, lambda c: c.get_acls_async(self.root))
        except NoSuchNodeError:
            return  # a new root: what we create gets our ACL
        except AccessDeniedError as e:
            raise AccessDeniedError(refused_with(self.root, self.security) or str(e)) from None
        problem = root_acl_problem(self.root, acls, self.security)
        if problem:
            raise AccessDeniedError(problem)

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False,
               sequential: bool = False) -> str:
        if path == "/":
            raise NodeExistsError("/ always exists")
        created = self._create_abs(self._abs(path), data, ephemeral, sequential)
        return created[len(self.root):]

    def get(self, path: str) -> tuple[bytes, int]:
        abs_path = self._abs(path)
        data, stat = self._run(abs_path, lambda c: c.get_async(abs_path))
        return data, stat.version

    def exists(self, path: str) -> int | None:
        abs_path = self._abs(path)
        stat = self._run(abs_path, lambda c: c.exists_async(abs_path))
        return None if stat is None else stat.version

    def _set_abs(self, abs_path: str, data: bytes, version: int | None) -> int:
        data = bytes(data)

        def after_loss(e: Exception) -> int:
            if isinstance(e, kz.BadVersionError) and version is not None:
                found = self._stat(abs_path)
                if found is not None and found[0] == data and found[1].version == version + 1:
                    return found[1]
            raise e
        stat = self._run(abs_path, lambda c: c.set_async(
            abs_path, data, -1 if version is None else version), after_loss)
        return stat.version

    def set(self, path: str, data: bytes, version: int | None) -> int:
        return self._set_abs(self._abs(path), data, version)

    def _delete_abs(self, abs_path: str, version: int | None) -> None:
        def after_loss(e: Exception) -> None:
            if isinstance(e, kz.NoNodeError):
                return None  # our earlier attempt deleted it
            raise e
        self._run(abs_path, lambda c: c.delete_async(
            abs_path, -1 if version is None else version), after_loss)

    def delete(self, path: str, version: int | None = None) -> None:
        if path == "/":
            raise MetadataError("the root cannot be deleted (format with force wipes it)")
        self._delete_abs(self._abs(path), version)

    def _children_abs(self, abs_path: str) -> list[str]:
        return sorted(self._run(abs_path, lambda c: c.get_children_async(abs_path)))

    def children(self, path: str) -> list[str]:
        return self._children_abs(self._abs(path))

    # -- watches -----------------------------------------------------------------------------

    def _data_watch(self, abs_path: str, deliver: Callable[[bytes | None, Any], None]) -> Cancel:
        """Watch ``abs_path``'s data: ``deliver`` gets every change after the watch is set.
        Setting it reads the node once (kazoo's DataWatch, which retries while ZooKeeper is
        unreachable, with no end): the caller waits at most ``timeout_s`` for that.  A watch set
        later (the store came back) delivers its first answer too, since the caller could not
        read the node meanwhile and may hold an older one."""
        state: dict[str, Any] = {"baseline": True, "last": None, "late": False}
        lock = threading.Lock()
        watch = Watch(lambda data, stat: deliver(data, stat))

        def on_data(data, stat, event=None):  # 3 args: kazoo retries a TypeError with 2
            if watch.cancelled:
                return False  # tells kazoo to stop watching
            key = None if stat is None else (stat.czxid, stat.mzxid)
            with lock:
                baseline, late = state["baseline"], state["late"]
                state["baseline"] = False
            if baseline and not late:
                state["last"] = key
                return None
            if baseline or key != state["last"]:
                state["last"] = key
                self._dispatcher.submit(watch.deliver, data, stat)
            return None

        failed: list[BaseException] = []
        set_up = threading.Event()

        def start() -> None:
            try:
                DataWatch(self._zk(), abs_path, on_data)
            except kz.KazooException as e:
                failed.append(e)
            finally:
                set_up.set()
        threading.Thread(target=start, daemon=True, name="zk-watch").start()
        if not set_up.wait(self.timeout_s):
            with lock:
                state["late"] = state["baseline"]  # not read yet: its first answer is news
            return watch.cancel
        if failed:
            raise map_error(failed[0], abs_path) from None
        return watch.cancel

    def watch_node(self, path: str, callback: Callable[[bytes | None, int], None]) -> Cancel:
        return self._data_watch(self._abs(path), lambda data, stat: callback(
            None, -1) if stat is None else callback(data, stat.version))

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Cancel:
        abs_path = self._abs(path)
        if path != "/" and self.exists(path) is None:
            try:
                self.create(path)  # a ChildrenWatch needs its node to exist
            except NodeExistsError:
                pass
        state: dict[str, Any] = {"baseline": True, "last": None}
        watch = Watch(callback)

        def on_children(kids):
            if watch.cancelled:
                return False
            kids = sorted(kids)
            if state["baseline"]:
                state["baseline"], state["last"] = False, kids
                return None
            if kids != state["last"]:
                state["last"] = kids
                self._dispatcher.submit(watch.deliver, kids)
            return None
        try:
            ChildrenWatch(self._zk(), abs_path, on_children)
        except kz.KazooException as e:
            raise map_error(e, abs_path) from None
        return watch.cancel

    # -- session plumbing --------------------------------------------------------------------

    def _claim_ephemeral(self, path: str, data: bytes) -> bool:
        abs_path = self._abs(path)
        try:
            self._create_abs(abs_path, data, ephemeral=True)
            return True
        except NodeExistsError:
            pass
        found = self._stat(abs_path)
        if found is None:
            return False  # gone meanwhile: the caller tries again
        if found[1].ephemeralOwner != self.session_id():
            return False
        if found[0] != data:
            self._set_abs(abs_path, data, found[1].version)
        return True

    def _move_ephemeral(self, old: str, new: str, data: bytes) -> None:
        old_abs, new_abs = self._abs(old), self._abs(new)
        self._ensure_parents(new_abs)

        def commit(c: KazooClient):
            txn = c.transaction()
            txn.create(new_abs, data, acl=self._acl(new_abs), ephemeral=True)
            txn.delete(old_abs)
            return txn.commit_async()
        try:
            results = self._run(f"move {old_abs} to {new_abs}", commit)
            if not any(isinstance(r, Exception) for r in results):
                return
        except MetadataError as e:
            log.info("atomic move of %s failed (%s); moving in two steps", old_abs, e)
        # Not atomic: the old node was missing or the new one present.  Claim, then release.
        deadline = time.monotonic() + self.timeout_s
        while not self._claim_ephemeral(new, data):
            if time.monotonic() >= deadline:
                raise NodeExistsError(f"{new_abs} is held by another session")
            time.sleep(0.05)
        found = self._stat(old_abs)
        if found is not None and found[1].ephemeralOwner == self.session_id():
            try:
                self._delete_abs(old_abs, None)
            except NoSuchNodeError:
                pass

    def _wipe(self) -> None:
        def remove(abs_path: str) -> None:
            try:
                kids = self._children_abs(abs_path)
            except NoSuchNodeError:
                return
            for kid in kids:
                remove(abs_path + "/" + kid)
            try:
                self._delete_abs(abs_path, None)
            except NoSuchNodeError:
                pass
        # The instance id goes first: node by node, a wipe shows readers a store that lists some
        # ledgers and not others, and a GC pass listing then would take the missing ones for
        # deleted.  It compares the instance id read before its listing with the one after
        # (workers/gc_worker.py ``collect``), so a listing that overlaps a wipe deletes nothing.
        remove(self._abs(INSTANCEID))
        remove(self.root)

    def _write_layout(self) -> None:
        record = orjson.dumps({"layout": self.layout, "format_version": 1})
        try:
            self._create_abs(self._abs(LAYOUT), record)
        except NodeExistsError:
            pass

    def _resolve_layout(self, requested: str | None, create: bool) -> str:
        """The layout stored in {root}/LAYOUT; written (from the URI, default hierarchical) if
        absent and ``create``, refused (``NoSuchStoreError``) if absent otherwise.  A URI that
        insists on another layout than the stored one is an error."""
        found = self._stat(self._abs(LAYOUT))
        if found is None:
            if not create:
                raise NoSuchStoreError(self.uri.text, f"ZooKeeper at {self.hosts} holds no "
                                       f"metadata store under {self.root} (no {LAYOUT} record)")
            self.layout = requested or "hierarchical"
            self._write_layout()
            found = self._stat(self._abs(LAYOUT))
        try:
            stored = orjson.loads(found[0])["layout"] if found else self.layout
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise CorruptMetadataError(f"{self.root}{LAYOUT}: unreadable layout record "
                                       f"{found[0][:60]!r}") from None
        if stored not in ("flat", "hierarchical"):
            raise CorruptMetadataError(f"{self.root}{LAYOUT}: unknown ledger layout {stored!r}")
        if requested is not None and requested != stored:
            raise MetadataError(f"{self.root} holds ledgers in the {stored} layout, but the URI "
                                f"{self.uri.text} asks for {requested}")
        return stored

    # -- ledgers -----------------------------------------------------------------------------

    def _ledger_path(self, ledger_id: int) -> str:
        if isinstance(ledger_id, bool) or not isinstance(ledger_id, int) \
                or not 0 <= ledger_id <= _MAX_ZK_ID:
            raise NoSuchLedgerError(ledger_id)
        digits = "%010d" % ledger_id
        if self.layout == "flat":
            return f"{self.root}/L{digits}"
        return f"{self.root}/{digits[:2]}/{digits[2:6]}/L{digits[6:]}"

    def create_ledger(self, meta: LedgerMetadata) -> tuple[int, int]:
        record = meta.to_bytes()
        if self.layout == "flat":
            created = self._create_abs(self.root + "/L", record, sequential=True)
            return int(created.rpartition("/L")[2]), 0
        for _ in range(10):  # a collision means someone wrote a ledger by hand; take another id
            idnode = self._create_abs(self.root + "/idgen/ID-", b"", ephemeral=True,
                                      sequential=True)
            ledger_id = int(idnode.rpartition("ID-")[2])
            try:
                self._delete_abs(idnode, None)
            except MetadataError:
                pass  # ephemeral: it goes with the session anyway
            try:
                self._create_abs(self._ledger_path(ledger_id), record)
                return ledger_id, 0
            except NodeExistsError:
                log.warning("ledger id %d already taken; taking another", ledger_id)
        raise MetadataError("could not allocate a free ledger id")

    def ledger_id_high_water(self) -> int:
        # Ledger ids are ZooKeeper sequence numbers of one parent (the root when flat,
        # {root}/idgen when hierarchical), strictly increasing per parent.  The only correct
        # read of "how far it got" is to take one: create an ephemeral sequential node under
        # the same parent and delete it.  Its number is above every id handed out before and
        # below every one handed out after, and is never a ledger's id itself.  (The parent's
        # cversion is no substitute: deletes bump it too, so it runs ahead of the sequence and
        # a later id could fall at or below it.)  Two writes per GC pass.
        if self.layout == "flat":
            prefix = self.root + "/" + HIGH_WATER_PREFIX
        else:
            prefix = self.root + "/idgen/ID-"
        node = self._create_abs(prefix, b"", ephemeral=True, sequential=True)
        try:
            self._delete_abs(node, None)
        except MetadataError:
            pass  # ephemeral: it goes with the session anyway
        return int(node[len(prefix):])

    def read_ledger(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        path = self._ledger_path(ledger_id)
        try:
            data, stat = self._run(path, lambda c: c.get_async(path))
        except NoSuchNodeError:
            raise NoSuchLedgerError(ledger_id) from None
        return LedgerMetadata.from_bytes(data, what=f"ledger {ledger_id}"), stat.version

    def read_ledger_latest(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        self._run(self.root, lambda c: c.sync_async(self.root))
        return self.read_ledger(ledger_id)

    def write_ledger(self, ledger_id: int, meta: LedgerMetadata, version: int) -> int:
        try:
            return self._set_abs(self._ledger_path(ledger_id), meta.to_bytes(), version)
        except NoSuchNodeError:
            raise NoSuchLedgerError(ledger_id) from None
        except BadVersionError:
            raise BadVersionError(f"ledger {ledger_id}: version is not {version}") from None

    def remove_ledger(self, ledger_id: int, version: int | None = None) -> None:
        try:
            self._delete_abs(self._ledger_path(ledger_id), version)
        except NoSuchNodeError:
            raise NoSuchLedgerError(ledger_id) from None
        except BadVersionError:
            raise BadVersionError(f"ledger {ledger_id}: version is not {version}") from None

    def _write_raw_ledger(self, ledger_id: int, data: bytes) -> None:
        path = self._ledger_path(ledger_id)
        try:
            self._set_abs(path, data, None)
        except NoSuchNodeError:
            self._create_abs(path, data)

    def _kids(self, abs_path: str) -> list[str]:
        try:
            return self._children_abs(abs_path)
        except NoSuchNodeError:
            return []  # removed while we iterate

    def ledger_ranges(self) -> Iterator[list[int]]:
        if self.layout == "flat":
            ids = sorted(int(m.group(1)) for m in map(_FLAT_NAME.match, self._kids(self.root)) if m)
            for i in range(0, len(ids), _RANGE_CHUNK):
                yield ids[i:i + _RANGE_CHUNK]
            return
        for l1 in (k for k in self._kids(self.root) if _L1.match(k)):
            for l2 in (k for k in self._kids(f"{self.root}/{l1}") if _L2.match(k)):
                ids = sorted(int(l1 + l2 + m.group(1)) for m in
                             map(_L3.match, self._kids(f"{self.root}/{l1}/{l2}")) if m)
                if ids:
                    yield ids

    def list_ledgers(self) -> Iterator[int]:
        for ids in self.ledger_ranges():
            yield from ids

    def watch_ledger(self, ledger_id: int,
                     callback: Callable[[LedgerMetadata | None, int], None]) -> Cancel:
        def deliver(data, stat):
            if stat is None:
                callback(None, -1)
                return
            try:
                meta = LedgerMetadata.from_bytes(data, what=f"ledger {ledger_id}")
            except CorruptMetadataError as e:
                log.warning("watch: %s", e)
                return
            callback(meta, stat.version)
        return self._data_watch(self._ledger_path(ledger_id), deliver)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        if self._pid == os.getpid() and self._client_obj is not None:
            try:
                super().close()
            finally:
                self._closed = True
                self._dispatcher.stop()
                try:
                    self._client_obj.stop()  # ends the session: ephemeral nodes go at once
                    self._client_obj.close()
                except Exception as e:
                    log.warning("closing ZooKeeper client: %s", e)
        self._closed = True
