"""The public client: ``BookKeeper`` (synchronous, with ``*_async`` variants returning
``concurrent.futures.Future``).

Metadata steps of create, open and delete run on the calling thread, or on a small pool for
the ``*_async`` variants; everything that talks to bookies - a recovery's metadata writes
included - runs on the I/O thread (``bookie.client.io``) inside the protocol state machines of
``bookie.client.protocol``, started by an ``OpRunner`` (``bookie.client.drivers``).  Ledgers
are ``LedgerHandle`` objects (``bookie.client.handle``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import weakref
from concurrent.futures import Future

from bookie.client.auth import client_curve
from bookie.client.resolver import BookieResolver
from bookie.client.config import ClientConfig
from bookie.client.digest import DigestManager, check_digest_type, master_key
from bookie.client.drivers import OpRunner, Throttle, WriterDriver
from bookie.client.errors import (ClientClosedError, DigestMismatchError, InvalidArgumentError,
                                  NoSuchLedgerError, NotEnoughBookiesError, UnauthorizedError)
from bookie.client.handle_api import LedgerHandle, LedgerHandleAdv
from bookie.client import log as log_recipes  # open_log, read_log, ...: the log recipes
from bookie.client.io import IOThread
from bookie.client.metrics import ClientMetrics
from bookie.client.metadata import ClientStore, LedgerMetadata, to_info
from bookie.client.protocol.lac import LacQuorumOp
from bookie.client.protocol.ledger import LedgerState, choose_ensemble
from bookie.client.protocol.placement import Placement
from bookie.client.protocol.quorum import check_quorums
from bookie.client.protocol.recovery import RecoveryOp
from bookie.client.protocol.writer import LedgerWriter
from bookie.client.merkle import MerkleTree
from bookie.client.verify import hashing_encoder
from bookie.metadata.ledger import make_verifier, password_matches
from bookie.wire import Flag

RECOVERY_CREDENTIAL = int(Flag.RECOVERY_CREDENTIAL)

__all__ = ["BookKeeper", "LedgerHandle"]

log = logging.getLogger("bookie.client")


class BookKeeper:
    """A client of a set of bookies registered in one metadata store.

    Args:
        metadata: a metadata service URI (``zk://host:port/ledgers``, ``lmdb:///path``) or an
            open ``MetadataStore`` (then not closed by this client); None: the one the keys
            name (``metadataServiceUri``, or ``zkServers`` under ``zkLedgersRootPath``).
        config: a ``ClientConfig`` or dict of BookKeeper client keys; ``**keys`` override it.
    """

    def __init__(self, metadata=None, config=None, **keys):
        self.config = cfg = ClientConfig.build(config, **keys)
        if metadata is None:
            metadata = cfg.metadata_uri
            if not metadata:
                raise InvalidArgumentError("no metadata store: pass a URI, or the client key "
                                           "metadataServiceUri (or zkServers)")
        if cfg.ignored_keys:
            log.info("client configuration keys with no meaning here, ignored: %s",
                     ", ".join(cfg.ignored_keys))
        curve = client_curve(cfg)  # bad key files fail here, before anything is opened
        self._store = ClientStore.open(metadata, timeout_s=cfg.zkTimeout / 1000.0,
                                       zk_security=cfg.zk_security())
        self._throttle = Throttle(cfg.throttle)
        self._rng = random.Random()
        self._closed = False
        # the client's metrics (bookie.client.metrics: shared by the process's clients), when on
        self._metrics = ClientMetrics() if cfg.enableClientMetrics else None
        # rack- or region-aware placement (client/protocol/placement.py), or None: at random
        self._placement = None if cfg.placement_policy == "default" else Placement(
            cfg.placement_policy, {}, cfg.minNumRacksPerWriteQuorum,
            cfg.enforceMinNumRacksPerWriteQuorum)
        write_metadata = self._store.write_metadata
        if self._metrics is not None:
            write_metadata = self._metrics.counted_metadata_writes(write_metadata)
        self._io = IOThread(
            add_timeout_s=cfg.addEntryTimeout, read_timeout_s=cfg.readTimeout,
            batch_max_entries=cfg.addBatchMaxEntries, batch_max_bytes=cfg.addBatchMaxBytes,
            list_bookies=self._list_writable, write_metadata=write_metadata)
        self._io.curve = curve
        # ensembles name bookies by id: their addresses come from their registrations
        self._resolver = BookieResolver(self._store.store)
        self._resolver.on_moved.append(self._io.bookie_moved)
        self._io.resolver = self._resolver
        self._io.pacer.retry_s = cfg.operationTimeout  # reads refused TOO_MANY_REQUESTS: retried
        self._runner = OpRunner(self._io, self._throttle, cfg.operationTimeout,
                                cfg.speculativeReadTimeout / 1000.0)
        self._runner.metrics = self._metrics
        # the writers this client runs, by ledger id: deleting one's ledger ends it
        self._writers: weakref.WeakValueDictionary[int, WriterDriver] = \
            weakref.WeakValueDictionary()
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="bookkeeper")

    @classmethod
    def from_conf(cls, path: str, metadata=None, **keys) -> "BookKeeper":
        """A client configured by the properties file ``path`` (BookKeeper's ``client.conf``:
        its metadataServiceUri, or zkServers, names the store unless ``metadata`` does), with
        ``keys`` over the file's.

        Raises:
            InvalidArgumentError: an unreadable or malformed file, an unknown key, a bad value,
                no metadata store named; one line naming it.
        """
        cfg = ClientConfig.from_file(path, **keys)
        if metadata is None and not cfg.metadata_uri:
            raise InvalidArgumentError(f"{path} names no metadata store (metadataServiceUri or "
                                       f"zkServers)")
        return cls(metadata, cfg)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the I/O thread (operations in flight fail with ClientClosedError) and close the
        metadata store if this client opened it.  Open ledgers are not closed."""
        if self._closed:
            return
        self._closed = True
        self._io.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._resolver.close()
        self._store.close()

    def __enter__(self) -> "BookKeeper":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metadata_store(self):
        """The ``MetadataStore`` underneath (``bookie.metadata``)."""
        return self._store.store

    @property
    def throttle_available(self) -> int:
        """How many adds may be handed over now without blocking on the throttle (a racy
        peek: another thread may take them first)."""
        return self._throttle.available

    def wait(self, future: Future, timeout_s: float | None = None):
        """The result of a Future from this client's ``*_async`` calls, waiting at most
        ``timeout_s`` (default ``operationTimeout``).  The synchronous calls are this over
        their ``*_async`` twins.

        Raises:
            BKTimeoutError: not done in time; the Future is cancelled (a read or recovery
                behind it stops; an add already sent may still complete).
            whatever the operation raised.
        """
        return self._runner.wait(future, timeout_s)

    # -- ledgers -------------------------------------------------------------------------------

    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                      digest: str | None = None, password: bytes | None = None,
                      custom: dict | None = None, write_flags=(),
                      verifiable: bool | None = None) -> LedgerHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and open it for writing.

        ``write_flags``: BookKeeper's ``WriteFlag`` names; ``["deferred_sync"]``: the LAC stays
        at the last ``handle.force()`` (adds still complete once acknowledged).
        ``verifiable`` (default: the client key ``ledgerVerifiableByDefault``): the close
        writes the RFC 9162 Merkle root of the entries; reads check every entry against it
        and ``handle.inclusion_proof`` proves one to anyone (docs/client.md).

        Raises:
            InvalidArgumentError: not E >= Qw >= Qa >= 1, unknown digest type, or an empty
                password while the client's ``allowEmptyPassword`` is off.
            NotEnoughBookiesError: fewer than E writable bookies registered.
        """
        return self._create(ensemble_size, write_quorum, ack_quorum, digest, password, custom,
                            adv=False, write_flags=write_flags, verifiable=verifiable)

    def create_ledger_adv(self, ensemble_size: int = 3, write_quorum: int = 2,
                          ack_quorum: int = 2, digest: str | None = None,
                          password: bytes | None = None,
                          custom: dict | None = None, write_flags=(),
                          verifiable: bool | None = None) -> LedgerHandleAdv:
        """``create_ledger`` whose handle takes the entry ids from its caller:
        ``add_entry(entry_id, data)``, ids out of order within the window (the client's
        ``throttle``); the LAC advances over the contiguous prefix only
        (``bookie.client.handle_api``).  Raises as ``create_ledger``."""
        return self._create(ensemble_size, write_quorum, ack_quorum, digest, password, custom,
                            adv=True, write_flags=write_flags, verifiable=verifiable)

    def create_ledger_adv_async(self, *args, **kwargs) -> Future:
        return self._pool.submit(self.create_ledger_adv, *args, **kwargs)

    def _create(self, ensemble_size, write_quorum, ack_quorum, digest, password, custom, *,
                adv: bool, write_flags=(), verifiable: bool | None = None) -> LedgerHandle:
        self._check_open()
        if verifiable is None:
            verifiable = self.config.ledgerVerifiableByDefault
        if not isinstance(verifiable, bool):
            raise InvalidArgumentError(f"verifiable must be True or False, got {verifiable!r}")
        deferred_sync = _deferred_sync(write_flags)
        try:
            check_quorums(ensemble_size, write_quorum, ack_quorum)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
        digest = check_digest_type(digest or self.config.digestType)
        password = self._password(password)
        if not password and not self.config.allowEmptyPassword:
            # b"" gives a master key everyone knows: anyone could fence, add to or recover it
            raise InvalidArgumentError(
                "refusing to create a ledger with an empty password (its master key is "
                "well known); pass password=b'...' (or the client's passwd key), or set the "
                "client key allowEmptyPassword=True to accept it")
        writable = self._list_writable()
        if self._placement is None:
            ensemble = choose_ensemble(ensemble_size, writable, self._rng)
        else:
            ensemble = self._placement.choose(ensemble_size, write_quorum, writable, self._rng)
            short = ensemble and self._placement.short_of(ensemble, write_quorum)
            if short:
                raise NotEnoughBookiesError(f"cannot create a ledger on {ensemble_size} "
                                            f"bookies: {short}"
                                            f"{self._placement.domains_of(writable)}")
        if ensemble is None:
            raise NotEnoughBookiesError(
                f"cannot create a ledger on {ensemble_size} bookies: only {len(writable)} "
                f"writable bookie(s) registered ({', '.join(sorted(writable)) or 'none'})"
                f"{self._read_only_note()}; start more bookies or lower ensemble_size")
        key = master_key(password)
        verifier = make_verifier(key)  # one scrypt serves both (metadata/ledger.py)
        meta = LedgerMetadata(ensemble_size, write_quorum, ack_quorum, digest_type=digest,
                              password_digest=verifier, key_check=verifier,
                              custom=dict(custom or {}), fragments=[(0, list(ensemble))],
                              features=["verifiable"] if verifiable else [])
        ledger_id, version = self._store.create_ledger(meta)
        info = to_info(ledger_id, meta)
        dm = DigestManager(ledger_id, digest, password)
        lac_interval_s = self.config.explicitLacInterval / 1000.0
        tree = MerkleTree() if verifiable else None
        writer = LedgerWriter(info, version, dm.encode, rng=self._rng,
                              explicit_lac_interval_s=lac_interval_s,
                              lac_notice_interval_s=self.config.lacNoticeInterval / 1000.0,
                              encode_many=hashing_encoder(tree, dm.encode_many),
                              deferred_sync=deferred_sync,
                              placement=self._placement,
                              curve=bool(self.config.curveSecretKeyFile))
        writer.merkle = tree
        driver = self._runner.start_writer(writer, key, lac_interval_s / 2)
        self._writers[ledger_id] = driver
        if adv:
            return LedgerHandleAdv(ledger_id, info, dm, key, self._runner, self._store,
                                   self.config.nettyMaxFrameSizeBytes, writer=driver,
                                   window=self.config.throttle, metrics=self._metrics)
        return LedgerHandle(ledger_id, info, dm, key, self._runner, self._store,
                            self.config.nettyMaxFrameSizeBytes, writer=driver,
                            metrics=self._metrics)

    def create_ledger_async(self, *args, **kwargs) -> Future:
        return self._pool.submit(self.create_ledger, *args, **kwargs)

    def open_ledger(self, ledger_id: int, digest: str | None = None,
                    password: bytes | None = None, recovery: bool = True) -> LedgerHandle:
        """Open a ledger for reading.

        With ``recovery`` (the default) a ledger that is not closed is fenced (its writer can
        add no more), its end found and re-replicated, and it is closed; every reader then sees
        the same entries.  Without, nothing is fenced and reads go up to the last-add-confirmed.

        Raises:
            NoSuchLedgerError, UnauthorizedError (wrong password; nothing was fenced),
            DigestMismatchError (wrong digest type), LedgerRecoveryError, BKTimeoutError.
        """
        self._check_open()
        digest = check_digest_type(digest or self.config.digestType)
        password = self._password(password)
        meta, version = self._store.read_ledger(ledger_id)
        if meta.digest_type != digest:
            raise DigestMismatchError(f"ledger {ledger_id} was written with digest "
                                      f"{meta.digest_type}, opened with {digest}",
                                      ledger_id=ledger_id)
        if meta.password_digest and not password_matches(meta.password_digest, password,
                                                         master_key(password)):
            raise UnauthorizedError(f"wrong password for ledger {ledger_id} (checked against "
                                    f"the metadata store; nothing was fenced)",
                                    ledger_id=ledger_id)
        key = master_key(password)
        dm = DigestManager(ledger_id, digest, password)
        info = to_info(ledger_id, meta)
        if recovery and info.state is not LedgerState.CLOSED:
            # one operation: mark IN_RECOVERY, fence, re-replicate the tail, close (all CAS)
            op = RecoveryOp(info, dm.decode, version, rng=self._rng,
                            placement=self._placement)
            self._runner.wait(self._runner.run(op, ledger_id, key))
            info = op.info  # the closed metadata (the future's completion orders this read)
        lac = None
        if info.state is not LedgerState.CLOSED:
            lac = self._runner.wait(self._runner.run(LacQuorumOp(info, False), ledger_id, key))
        return LedgerHandle(ledger_id, info, dm, key, self._runner, self._store,
                            self.config.nettyMaxFrameSizeBytes, last_add_confirmed=lac,
                            metrics=self._metrics)

    def recover_with_credential(self, ledger_id: int, credential: bytes, password: bytes = b"",
                                lost=(), avoid=()) -> None:
        """Recover (fence, re-replicate the tail, close) a ledger that is not closed, proving
        the right to on the ledger's cluster recovery credential instead of its master key
        (autorecovery: bookie.metadata.recovery_secret).  ``password`` serves only to check
        the entries' digests: any will do for crc32, crc32c and dummy, a ``mac`` ledger needs
        its own.  ``lost``: bookies known gone, replaced at once rather than waited for;
        ``avoid``: bookies still running that must get no re-add (a decommissioned one), read
        from but replaced at once.
        Raises as ``open_ledger`` does."""
        self._check_open()
        meta, version = self._store.read_ledger(ledger_id)
        info = to_info(ledger_id, meta)
        if info.state is LedgerState.CLOSED:
            return
        dm = DigestManager(ledger_id, meta.digest_type, password)
        op = RecoveryOp(info, dm.decode, version, rng=self._rng, placement=self._placement,
                        lost=lost, avoid=avoid)
        self._runner.wait(self._runner.run(op, ledger_id, credential, key_flags=RECOVERY_CREDENTIAL))

    def open_ledger_async(self, *args, **kwargs) -> Future:
        return self._pool.submit(self.open_ledger, *args, **kwargs)

    def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space in their garbage collection.
        A handle of this client still writing the ledger fails its pending and later adds with
        NoSuchLedgerError; nothing else of the client is affected.

        Raises:
            NoSuchLedgerError: no such ledger.
        """
        self._check_open()
        self._store.remove_ledger(ledger_id)
        writer = self._writers.pop(ledger_id, None)
        if writer is not None:
            self._runner.end_writer(writer, NoSuchLedgerError(
                f"ledger {ledger_id} was deleted (by this client) while this handle was "
                f"writing it; it takes no more adds", ledger_id=ledger_id))

    def delete_ledger_async(self, ledger_id: int) -> Future:
        return self._pool.submit(self.delete_ledger, ledger_id)

    def list_ledgers(self) -> list[int]:
        return self._store.list_ledgers()

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's stored record as it is now: quorums, state, last entry, length,
        digest type, ``ctime_ms``, fragments and the ``custom`` fields given at creation.
        A copy: changing it changes nothing.

        Raises:
            NoSuchLedgerError.
        """
        self._check_open()
        return self._store.read_ledger(ledger_id)[0]

    def find_ledgers(self, custom: dict) -> list[int]:
        """Ids (ascending) of the ledgers whose ``custom`` fields include every key/value pair
        of ``custom`` - the tags a recipe gave ``create_ledger``.  Reads every ledger's record
        (O(ledgers) store calls): for sweepers and tools, not for hot paths.  A ledger deleted
        while the listing runs is left out."""
        self._check_open()
        want = {str(k): str(v) for k, v in custom.items()}
        found = []
        for ledger_id in sorted(self._store.list_ledgers()):
            try:
                meta, _ = self._store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                continue
            if all(meta.custom.get(k) == v for k, v in want.items()):
                found.append(ledger_id)
        return found

    # -- custom records (for recipes such as logs) ---------------------------------------------

    def read_record(self, path: str) -> tuple[bytes, int]:
        """``(data, version)`` of the custom record at ``path`` (absolute, under the metadata
        root, within ``/records`` or ``/logs``: the rest is the cluster's and refused).

        Raises:
            NoSuchRecordError.  InvalidArgumentError: a malformed path.
        """
        return self._store.get_record(path)

    def create_record(self, path: str, data: bytes = b"") -> None:
        """Create a record (and missing parents).  Raises RecordExistsError."""
        self._store.create_record(path, data)

    def write_record(self, path: str, data: bytes, version: int) -> int:
        """Compare-and-swap: replace the record's data if its version is still ``version``;
        returns the new version.

        Raises:
            BadVersionError: another client changed it since.  NoSuchRecordError.
        """
        return self._store.set_record(path, data, version)

    def delete_record(self, path: str, version: int | None = None) -> None:
        """Delete the record (only at ``version``, if given).

        Raises:
            BadVersionError, NoSuchRecordError.
        """
        self._store.delete_record(path, version)

    def list_records(self, path: str) -> list[str]:
        """Names of the records under ``path``, sorted ([] when there is none)."""
        return self._store.list_records(path)

    # -- logs (ledgers to logs; see bookie.client.log) -----------------------------------------

    def open_log(self, name: str, *args, **kwargs):
        """Become the writer of log ``name``: see :func:`bookie.client.log.open_log`."""
        return log_recipes.open_log(self, name, *args, **kwargs)

    def read_log(self, name: str, *args, **kwargs):
        """Iterate over log ``name`` without fencing: see :func:`bookie.client.log.read_log`."""
        return log_recipes.read_log(self, name, *args, **kwargs)

    def list_logs(self) -> list[str]:
        return log_recipes.list_logs(self)

    def delete_log(self, name: str) -> None:
        log_recipes.delete_log(self, name)

    def create_log(self, name: str) -> bool:
        """Create an empty log: see :func:`bookie.client.log.create_log`."""
        return log_recipes.create_log(self, name)

    def log_ledgers(self, name: str) -> tuple[list[int], int]:
        """The log's ledger list and version: see :func:`bookie.client.log.log_ledgers`."""
        return log_recipes.log_ledgers(self, name)

    def link_ledgers(self, name: str, ledger_ids, version: int) -> int:
        """Append closed ledgers to a log with one CAS: see
        :func:`bookie.client.log.link_ledgers`."""
        return log_recipes.link_ledgers(self, name, ledger_ids, version)

    # -- internals -----------------------------------------------------------------------------

    def _list_writable(self) -> list[str]:
        """The writable bookies; with a rack- or region-aware policy, their locations read
        into the placement first (creates and ensemble changes then place by them)."""
        writable = self._store.list_writable()
        if self._placement is not None:
            self._placement.locations = self._store.locations(writable)
        return writable

    def _read_only_note(self) -> str:
        """For a create that found too few writable bookies: the read-only ones, and the
        usual reason, so that a full disk is not mistaken for bookies that are down."""
        try:
            readonly = self._store.store.list_bookies(readonly=True)
        except Exception:  # noqa: BLE001 - the store failed meanwhile: say nothing more
            return ""
        if not readonly:
            return ""
        return (f", and {len(readonly)} read-only ({', '.join(sorted(readonly))}: a bookie "
                f"turns read-only when a disk is fuller than its diskUsageThreshold, or when "
                f"an operator set it so)")

    def _password(self, password) -> bytes:
        if password is None:
            return self.config.passwd
        return password.encode() if isinstance(password, str) else bytes(password)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the BookKeeper client is closed; create a new one")


WRITE_FLAGS = ("deferred_sync",)  # BookKeeper's WriteFlag names this client has


def _deferred_sync(write_flags) -> bool:
    """Whether ``write_flags`` (names, any case: ``deferred_sync`` / ``DEFERRED_SYNC``) ask for
    deferred sync.  Raises InvalidArgumentError for a name it does not know."""
    if isinstance(write_flags, str):
        write_flags = [write_flags]
    names = {str(f).lower() for f in write_flags or ()}
    unknown = names - set(WRITE_FLAGS)
    if unknown:
        raise InvalidArgumentError(f"unknown write flag(s) {', '.join(sorted(unknown))}; known: "
                                   f"{', '.join(WRITE_FLAGS)}")
    return "deferred_sync" in names
