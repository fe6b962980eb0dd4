"""Client configuration: BookKeeper's client keys where they apply, typed, with defaults.

    BookKeeper("lmdb:///var/lib/bookie/metadata", throttle=10_000, readTimeout=2)
    BookKeeper(uri, config={"addEntryTimeout": 1, "digestType": "crc32c"})

Unknown keys raise InvalidArgumentError naming the key (a typo must not pass silently).
Values may be given typed or as text, whatever the source (keyword arguments, a dict, a
``client.conf`` file, ``--set``, Spark's ``bookkeeper.<key>`` options, the test fixtures): text
is read by the one vocabulary of ``bookie.properties`` (``true``/``yes``/``on``/``1`` ...), so
``allowEmptyPassword="false"`` is False everywhere, never the truthy string ``'false'``.
"""

from __future__ import annotations

import dataclasses

from bookie.client.errors import InvalidArgumentError
from bookie.properties import PropertiesError, parse_value


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
    nettyMaxFrameSizeBytes: int = 5 * 1024 * 1024  # largest entry the client sends
    digestType: str = "crc32c"  # default digest of create_ledger / open_ledger
    passwd: bytes = b""  # default password of create_ledger / open_ledger
    allowEmptyPassword: bool = False  # create_ledger refuses b"" (a well-known key) unless set
    zkLedgersRootPath: str = "/ledgers"  # used when a zk URI names no root
    addBatchMaxEntries: int = 4096  # most entries in one ADD message (the wire allows 65536)
    addBatchMaxBytes: int = 1024 * 1024  # an ADD message is cut once it carries this many bytes
    operationTimeout: float = 60.0  # s: longest a synchronous call waits before BKTimeoutError
    # CURVE (client/auth.py, docs/security.md): this client's secret key file, and the bookie
    # public key file (or directory of HOST_PORT.key files) it pins.  Both or neither.
    curveSecretKeyFile: str = ""
    curveServerKeys: str = ""
    # ZooKeeper ACLs (metadata/zk_acl.py, docs/security.md): BookKeeper's zkEnableSecurity, and
    # the file (mode 0600) of the cluster's digest credentials user:password.
    zkEnableSecurity: bool = False
    zkDigestAuthFile: str = ""

    @classmethod
    def build(cls, config=None, **keys) -> "ClientConfig":
        """Merge a ClientConfig or dict with keyword overrides; check every value."""
        values: dict = {}
        if isinstance(config, ClientConfig):
            values.update(dataclasses.asdict(config))
        elif config:
            values.update(dict(config))
        values.update(keys)
        names = {f.name: f for f in dataclasses.fields(cls)}
        for k in values:
            if k not in names:
                raise InvalidArgumentError(f"unknown client configuration key {k!r}; known keys: "
                                           f"{', '.join(sorted(names))}")
        values = {k: cls.convert(k, v) for k, v in values.items()}
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
        kind = _FIELD_TYPES.get(name)
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
        need(self.nettyMaxFrameSizeBytes >= 64, "nettyMaxFrameSizeBytes", "must be >= 64")
        need(1 <= self.addBatchMaxEntries <= 65536, "addBatchMaxEntries", "must be 1..65536")
        need(self.addBatchMaxBytes >= 1, "addBatchMaxBytes", "must be >= 1")
        need(self.operationTimeout > 0, "operationTimeout", "must be > 0 s")
        need(isinstance(self.zkEnableSecurity, bool), "zkEnableSecurity", "must be true or false")
        self.zk_security()

    def zk_security(self):
        """zkEnableSecurity and zkDigestAuthFile as a ``ZkSecurity`` for ``open_metadata``
        (None: no credentials); the file read and checked.  Raises InvalidArgumentError."""
        from bookie.metadata import AccessDeniedError, load_zk_security
        try:
            return load_zk_security(self.zkEnableSecurity, self.zkDigestAuthFile)
        except AccessDeniedError as exc:
            raise InvalidArgumentError(f"client configuration {exc}") from None


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(ClientConfig)}
