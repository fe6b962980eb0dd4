"""Client configuration: BookKeeper's client keys where they apply, typed, with defaults.

    BookKeeper("lmdb:///var/lib/bookie/metadata", throttle=10_000, readTimeout=2)
    BookKeeper(uri, config={"addEntryTimeout": 1, "digestType": "crc32c"})
    BookKeeper.from_conf("client.conf")       # metadataServiceUri=zk://zk1:2181/ledgers ...

Three kinds of names are accepted:

- this client's keys (the fields of ``ClientConfig``), most of them BookKeeper's own;
- BookKeeper's names for the same settings (``ALIASES``: ``addEntryTimeoutSec`` is
  ``addEntryTimeout``, ``readEntryTimeoutSec`` is ``readTimeout``, ...), so a stock
  ``client.conf`` means here what it means to BookKeeper's client; giving both names of one
  setting with different values is refused;
- BookKeeper's keys that have no meaning here (``IGNORED_KEYS``: ``useV2WireProtocol``, Netty's
  thread and buffer settings, ...): accepted, kept in ``ignored_keys``, and named by one info
  log line per client.

Unknown keys raise InvalidArgumentError naming the key and the nearest known name ("did you
mean"): a typo must not pass silently.
Values may be given typed or as text, whatever the source (keyword arguments, a dict, a
``client.conf`` file, ``--set``, Spark's ``bookkeeper.<key>`` options, the test fixtures): text
is read by the one vocabulary of ``bookie.properties`` (``true``/``yes``/``on``/``1`` ...), so
``allowEmptyPassword="false"`` is False everywhere, never the truthy string ``'false'``.
"""

from __future__ import annotations

import dataclasses
import difflib

from bookie.client.errors import InvalidArgumentError
from bookie.metadata.uri import SCHEMES_HELP, known_scheme
from bookie.properties import (PropertiesError, parse_value, read_properties,
                               resolve_metadata_uri)

# BookKeeper's name -> this client's key of the same meaning (and unit).
ALIASES = {
    "addEntryTimeoutSec": "addEntryTimeout",  # s, as here
    "readEntryTimeoutSec": "readTimeout",  # s, as here
    "firstSpeculativeReadTimeout": "speculativeReadTimeout",  # ms, as here
}
# BookKeeper's client keys that name something this client does not have (Netty, its thread
# pools, its v2 wire protocol, its stats providers): accepted so that a stock client.conf loads,
# and logged once per client as ignored.  Keys whose absence would weaken something a user asked
# for (TLS, authentication providers) are deliberately not here: they are refused as unknown.
# Spelled exactly as BookKeeper's ClientConfiguration spells them (``stickyReadSEnabled`` with
# its capital S, ``clientTcpUserTimeoutMillis``, ``nettyUsePooledBuffers``).
IGNORED_KEYS = frozenset({
    "useV2WireProtocol", "numWorkerThreads", "numIOThreads", "numChannelsPerBookie",
    "clientTcpNoDelay", "clientSockKeepalive", "clientConnectTimeoutMillis",
    "clientTcpUserTimeoutMillis", "clientSendBufferSize", "clientReceiveBufferSize",
    "clientWriteBufferLowWaterMark", "clientWriteBufferHighWaterMark",
    "nettyUsePooledBuffers", "enableDigestTypeAutodetection",
    "reorderReadSequenceEnabled", "stickyReadSEnabled", "bookieHealthCheckEnabled",
    "bookieHealthCheckIntervalSeconds", "delayEnsembleChange", "enableTaskExecutionStats",
    "preserveMdcForTaskExecution", "statsProviderClass", "ledgerManagerFactoryClass",
    "allowShadedLedgerManagerFactoryClass", "enableBookieFailureTracking",
    "bookieFailureHistoryExpirationMSec", "timeoutTaskIntervalMillis",
    "zkRetryBackoffStartMs", "zkRetryBackoffMaxMs", "zkRequestRateLimit", "clientRole",
    "bookieAddressResolverEnabled", "enableBookieAddressTracking",
})
# ensemblePlacementPolicy: each policy (client/protocol/placement.py) by its spellings.
PLACEMENT_POLICIES = {
    "default": "default", "org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy": "default",
    "rackaware": "rackaware",
    "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy": "rackaware",
    "regionaware": "regionaware",
    "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy": "regionaware",
}


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    # BookKeeper key names, so that configuration written for BookKeeper reads the same here.
    zkTimeout: int = 10_000  # ms: longest a metadata store call may take (and ZK session timeout)
    throttle: int = 5_000  # most adds outstanding per client; add_entry_async blocks beyond it
    readTimeout: float = 5.0  # s without an answer before a read/LAC/fence request fails over
    # ms without an answer before a READ is also asked of the entries' next replica (0: never).
    # BookKeeper's default is 2000; 500 here: a stopped replica costs a reader half a second
    # once (later reads start elsewhere), while a healthy read slower than that - seen only
    # on an overloaded host - costs one duplicate READ.
    speculativeReadTimeout: int = 500
    addEntryTimeout: float = 5.0  # s without an answer before a bookie counts as failed for adds
    explicitLacInterval: int = 100  # ms: idle writer tells bookies its LAC after this (0: never)
    # ms: while adds are outstanding, the writer tells its bookies a LAC no add carried yet, on
    # a connection of its own that no queued add delays, when acks wait this long or the LAC
    # went uncarried this long; at most this often (tailers' lag; 0: never; writer.py _notice)
    lacNoticeInterval: float = 10.0
    nettyMaxFrameSizeBytes: int = 5 * 1024 * 1024  # largest entry the client sends
    digestType: str = "crc32c"  # default digest of create_ledger / open_ledger
    passwd: bytes = b""  # default password of create_ledger / open_ledger
    allowEmptyPassword: bool = False  # create_ledger refuses b"" (a well-known key) unless set
    ledgerVerifiableByDefault: bool = False  # create_ledger's verifiable when not given (issue 43)
    zkLedgersRootPath: str = "/ledgers"  # used when a zk URI names no root
    addBatchMaxEntries: int = 4096  # most entries in one ADD message (the wire allows 65536)
    addBatchMaxBytes: int = 1024 * 1024  # an ADD message is cut once it carries this many bytes
    operationTimeout: float = 60.0  # s: longest a synchronous call waits before BKTimeoutError
    # CURVE (client/auth.py, docs/security.md): this client's secret key file, and the bookie
    # public key file (or directory of HOST_PORT.key files) it pins.  Both or neither.
    curveSecretKeyFile: str = ""
    curveServerKeys: str = ""
    # Speak in the clear to a bookie whose registration publishes no CURVE key (a bookie from
    # before keys, a benchmark's clear-text baseline); otherwise such a bookie is refused.
    allowClearTextBookies: bool = False
    # Reach a bookie on this host over its local sockets (client/local_sockets.py: checked with
    # lstat, the kernel vouching for both ends; no CURVE there); false: always TCP with CURVE.
    useLocalSockets: bool = True
    # ZooKeeper ACLs (metadata/zk_acl.py, docs/security.md): BookKeeper's zkEnableSecurity, and
    # the file (mode 0600) of the cluster's digest credentials user:password.
    zkEnableSecurity: bool = False
    zkDigestAuthFile: str = ""
    # The metadata store, as a BookKeeper client.conf names it (used when ``BookKeeper`` is given
    # no URI, e.g. ``BookKeeper.from_conf``): metadataServiceUri, else zkServers under
    # zkLedgersRootPath (hosts separated by , or ;).
    metadataServiceUri: str = ""
    zkServers: str = ""
    # How ensembles are chosen (client/protocol/placement.py): "default" (E writable bookies at
    # random), "rackaware" (every write quorum over as many racks as there are: the bookies'
    # bookieLocation /REGION/RACK), "regionaware" (over regions); BookKeeper's class names too.
    ensemblePlacementPolicy: str = "default"
    minNumRacksPerWriteQuorum: int = 2  # the spread an enforced policy insists on
    enforceMinNumRacksPerWriteQuorum: bool = False  # refuse ensembles below it (else best effort)
    # Client metrics on prometheus_client (bookie.client.metrics, docs/metrics.md): the
    # bookkeeper_client_* families, shared by every client of the process that turns them on.
    enableClientMetrics: bool = False
    # BookKeeper's keys of this file that mean nothing here (IGNORED_KEYS), as given: not a key.
    ignored_keys: tuple = dataclasses.field(default=(), repr=False, compare=False)

    @classmethod
    def build(cls, config=None, **keys) -> "ClientConfig":
        """Merge a ClientConfig or dict with keyword overrides; check every value."""
        values: dict = {}
        ignored: list = []
        if isinstance(config, ClientConfig):
            values.update(dataclasses.asdict(config))
            ignored += values.pop("ignored_keys")
        elif config:
            values.update(dict(config))
        values.update(keys)
        values = _canonical(values)
        ignored += [k for k in values if k in IGNORED_KEYS]
        for k in ignored:
            values.pop(k, None)
        for k in values:
            if k not in _FIELD_TYPES:
                near = difflib.get_close_matches(k, accepted_names(), n=1, cutoff=0.75)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise InvalidArgumentError(f"unknown client configuration key {k!r}{hint}; known "
                                           f"keys: {', '.join(sorted(_FIELD_TYPES))}")
        values = {k: cls.convert(k, v) for k, v in values.items()}
        values["ignored_keys"] = tuple(dict.fromkeys(ignored))
        try:
            cfg = cls(**values)
        except TypeError as exc:
            raise InvalidArgumentError(f"bad client configuration: {exc}") from None
        cfg.check()
        return cfg

    @classmethod
    def convert(cls, name: str, value):
        """``value`` (typed, or text as written) as key ``name``'s type, by the vocabulary of
        ``bookie.properties``; ``passwd`` text becomes bytes; an unknown name is returned as it
        is (``build`` names it).

        Raises:
            InvalidArgumentError: ``client key NAME='text' is not a number`` (or an integer,
                or true or false).
        """
        kind = _FIELD_TYPES.get(ALIASES.get(name, name))
        if kind == "bytes":
            return value.encode() if isinstance(value, str) else value
        if kind not in ("int", "float", "bool"):
            return value
        try:
            return parse_value(kind, value)
        except PropertiesError as e:
            raise InvalidArgumentError(f"client key {name}={e}") from None

    def check(self) -> None:
        def need(ok: bool, key: str, what: str) -> None:
            if not ok:
                raise InvalidArgumentError(f"client configuration {key}={getattr(self, key)!r}: "
                                           f"{what}")
        need(self.zkTimeout > 0, "zkTimeout", "must be > 0 ms")
        need(self.throttle >= 1, "throttle", "must be >= 1")
        need(self.readTimeout > 0, "readTimeout", "must be > 0 s")
        need(self.speculativeReadTimeout >= 0, "speculativeReadTimeout", "must be >= 0 ms")
        need(self.addEntryTimeout > 0, "addEntryTimeout", "must be > 0 s")
        need(self.explicitLacInterval >= 0, "explicitLacInterval", "must be >= 0 ms")
        need(self.lacNoticeInterval >= 0, "lacNoticeInterval", "must be >= 0 ms")
        need(self.nettyMaxFrameSizeBytes >= 64, "nettyMaxFrameSizeBytes", "must be >= 64")
        need(1 <= self.addBatchMaxEntries <= 65536, "addBatchMaxEntries", "must be 1..65536")
        need(self.addBatchMaxBytes >= 1, "addBatchMaxBytes", "must be >= 1")
        need(self.operationTimeout > 0, "operationTimeout", "must be > 0 s")
        need(isinstance(self.zkEnableSecurity, bool), "zkEnableSecurity", "must be true or false")
        need(not self.metadataServiceUri or known_scheme(self.metadataServiceUri),
             "metadataServiceUri", f"must be {SCHEMES_HELP}")
        need(self.zkLedgersRootPath.startswith("/"), "zkLedgersRootPath",
             "must be an absolute path such as /ledgers")
        need(self.ensemblePlacementPolicy in PLACEMENT_POLICIES, "ensemblePlacementPolicy",
             "must be default, rackaware or regionaware (or BookKeeper's class name of one)")
        need(self.minNumRacksPerWriteQuorum >= 1, "minNumRacksPerWriteQuorum", "must be >= 1")
        self.zk_security()

    @property
    def placement_policy(self) -> str:
        """ensemblePlacementPolicy as ``default``, ``rackaware`` or ``regionaware``."""
        return PLACEMENT_POLICIES[self.ensemblePlacementPolicy]

    @property
    def metadata_uri(self) -> str:
        """The metadata store these keys name: metadataServiceUri (BookKeeper's ``;`` between
        ZooKeeper hosts read as ``,``), else zk://zkServers/zkLedgersRootPath, else ""."""
        return resolve_metadata_uri({"metadataServiceUri": self.metadataServiceUri,
                                     "zkServers": self.zkServers,
                                     "zkLedgersRootPath": self.zkLedgersRootPath})

    @classmethod
    def from_file(cls, path: str, **keys) -> "ClientConfig":
        """The client keys of the properties file ``path`` (BookKeeper's ``client.conf``), with
        ``keys`` over them; checked as ``build`` checks them.

        Raises:
            InvalidArgumentError: an unreadable file, a malformed line, an unknown key or a bad
                value: one line naming it (and the file).
        """
        try:
            raw = read_properties(path, "client configuration")
        except PropertiesError as e:
            raise InvalidArgumentError(str(e)) from None
        try:
            typed = {k: v if k == "passwd" else cls.convert(k, v) for k, v in raw.items()}
            return cls.build(typed, **keys)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{path}: {e}") from None

    def zk_security(self):
        """zkEnableSecurity and zkDigestAuthFile as a ``ZkSecurity`` for ``open_metadata``
        (None: no credentials); the file read and checked.  Raises InvalidArgumentError."""
        from bookie.metadata import AccessDeniedError, load_zk_security  # lazy: kazoo
        try:
            return load_zk_security(self.zkEnableSecurity, self.zkDigestAuthFile)
        except AccessDeniedError as exc:
            raise InvalidArgumentError(f"client configuration {exc}") from None


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(ClientConfig)}


_FIELD_TYPES.pop("ignored_keys")


def accepted_names() -> list[str]:
    """Every key name a client configuration accepts: its own, BookKeeper's aliases, and
    BookKeeper's keys that are ignored here."""
    return sorted({*_FIELD_TYPES, *ALIASES, *IGNORED_KEYS})


def _canonical(values: dict) -> dict:
    """``values`` with BookKeeper's alias names replaced by this client's; both names of one
    setting with different values is an InvalidArgumentError."""
    out: dict = {}
    for name, value in values.items():
        key = ALIASES.get(name, name)
        if key in out and out[key] != value:
            raise InvalidArgumentError(
                f"client configuration: {name}={value!r} and its other name "
                f"{key if key != name else next(a for a, k in ALIASES.items() if k == key)}"
                f"={out[key]!r} disagree; give one")
        out[key] = value
    return out
