"""Metadata stores: ledger metadata, bookie membership and cookies, behind one interface.

    from bookie.metadata import open_metadata, LedgerMetadata
    with open_metadata("lmdb:///var/lib/bookie/metadata") as store:
        ledger_id, version = store.create_ledger(LedgerMetadata(3, 2, 2, fragments=[(0, ensemble)]))

``open_metadata`` picks the backend from the URI (see ``uri.py``): ZooKeeper through kazoo for
clusters (``zk://``, ``zk+flat://``, ``zk+hierarchical://``), or the embedded LMDB store for one
host (``lmdb:///abs/path``).  Both pass one contract test suite (tests/contract/test_metadata_contract.py);
docs/metadata.md describes the node tree, the record format and the delivery delay of watches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookie.metadata.errors import (
    AccessDeniedError, BadVersionError, ConnectionLossError, CookieNotFoundError, CorruptMetadataError,
    InvalidUriError, MetadataError, MetadataTimeoutError, NodeExistsError, NoSuchLedgerError,
    NoSuchNodeError, NoSuchStoreError, NotEmptyError)
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.metadata.store import BookieRegistration, MetadataStore
from bookie.metadata.uri import MetadataUri, parse_uri

if TYPE_CHECKING:
    from bookie.metadata.zk_acl import ZkSecurity

__all__ = [
    "open_metadata", "MetadataStore", "BookieRegistration", "LedgerMetadata", "LedgerState",
    "MetadataUri", "parse_uri",
    "MetadataError", "BadVersionError", "NoSuchLedgerError", "NoSuchNodeError",
    "CookieNotFoundError", "NodeExistsError", "NotEmptyError", "MetadataTimeoutError",
    "ConnectionLossError", "CorruptMetadataError", "InvalidUriError", "NoSuchStoreError",
    "AccessDeniedError", "ZkSecurity", "load_zk_security",
]


def __getattr__(name: str):
    # ZooKeeper's security (kazoo's ACLs) is loaded when first asked for: the embedded store,
    # its clients and the pure cores import this package without kazoo.
    if name in ("ZkSecurity", "load_zk_security"):
        from bookie.metadata import zk_acl  # lazy: kazoo
        return getattr(zk_acl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_metadata(uri: str, timeout_s: float = 10.0, *, lease_ms: int = 5000,
                  watch_poll_s: float = 0.1, session_timeout_s: float | None = None,
                  map_size_bytes: int = 1 << 30, create: bool = False,
                  zk_security: ZkSecurity | None = None) -> MetadataStore:
    """Open the metadata store the URI names; it must exist unless ``create`` is given.

    A URI that names no initialised store is refused, and nothing is made there: a typo in a
    path or a root must not start a new, empty cluster.  Only the commands that make stores
    (``bookie shell metaformat``, ``bookie localbookie`` and the test harnesses) pass
    ``create=True``; bookies, clients, the shell's other commands and the benchmarks never do.

    Args:
        uri: ``zk://host:port[,host:port...][/root]`` (also ``zk+flat://``,
            ``zk+hierarchical://``) or ``lmdb:///abs/path``.
        timeout_s: longest any call may take, opening included (``zkTimeout``).
        lease_ms: embedded store: lifetime of this store's registrations without renewal
            (``registrationLeaseMs``); they are renewed every lease_ms/4.
        watch_poll_s: embedded store: poll interval of watches (the bound on their delay).
        session_timeout_s: ZooKeeper session timeout (default: ``timeout_s``).
        map_size_bytes: embedded store: largest size of the LMDB file.
        create: initialise the store if there is none (an existing one is kept as it is).
        zk_security: ZooKeeper: the digest credentials and whether created nodes get an ACL
            (``zkEnableSecurity``, ``zkDigestAuthFile``; see ``zk_acl.py``).  The embedded
            store ignores it: its files are the bookie user's alone.

    Raises:
        InvalidUriError: the URI is malformed.
        NoSuchStoreError: no initialised store there, and ``create`` is False; the message
            says how to create one (``bookie shell metaformat --metadata URI``).
        MetadataTimeoutError: the ZooKeeper servers cannot be reached within ``timeout_s``.
        AccessDeniedError: ZooKeeper refused access, or the root's ACL does not fit
            ``zk_security`` (the message names the key to set).
        MetadataError: the store cannot be opened (directory not usable, layout mismatch).
    """
    parsed = parse_uri(uri)
    if parsed.scheme == "lmdb":
        from bookie.metadata.embedded import EmbeddedMetadataStore  # lazy: lmdb
        return EmbeddedMetadataStore(parsed.path, timeout_s, lease_ms=lease_ms,
                                     watch_poll_s=watch_poll_s, map_size_bytes=map_size_bytes,
                                     create=create)
    from bookie.metadata.zk import ZooKeeperMetadataStore  # lazy: kazoo
    return ZooKeeperMetadataStore(parsed, timeout_s, session_timeout_s=session_timeout_s,
                                  create=create, security=zk_security)
