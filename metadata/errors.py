"""Errors of the metadata store, shared by both backends.

Every error a store raises is a ``MetadataError``; callers that only want "it did not work" catch
that.  The subclasses are the outcomes a caller acts on differently: a version conflict (re-read
and retry), a missing ledger or node, a node that already exists, a timeout, a bad URI, a record
that cannot be decoded, a URI that names no store.
"""

from __future__ import annotations


class MetadataError(Exception):
    """Base of every error raised by a metadata store."""


class NoSuchStoreError(MetadataError):
    """The URI names no initialised metadata store (a typo, or a store never formatted).

    Opening it would have made a new, empty cluster; only ``metaformat`` and ``localbookie``
    create stores.  The message says how to create one."""

    def __init__(self, uri: str, reason: str):
        super().__init__(f"{uri}: {reason}; if it is the right one, create it with "
                         f"'bookie shell metaformat --metadata {uri}'")
        self.uri = uri


class InvalidUriError(MetadataError, ValueError):
    """A metadata service URI that cannot be used; the message says what is wrong with it."""


class MetadataTimeoutError(MetadataError, TimeoutError):
    """The store did not answer within the call's timeout (server unreachable, session lost)."""


class ConnectionLossError(MetadataError):
    """The connection dropped while a non-repeatable write was in flight: its outcome is unknown."""


class NoSuchNodeError(MetadataError, KeyError):
    """The node (path) does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "no such node"


class NoSuchLedgerError(NoSuchNodeError):
    """The ledger has no metadata in the store."""

    def __init__(self, ledger_id: int):
        super().__init__(f"ledger {ledger_id} does not exist")
        self.ledger_id = ledger_id


class CookieNotFoundError(NoSuchNodeError):
    """No cookie is stored for this bookie id."""

    def __init__(self, bookie_id: str):
        super().__init__(f"no cookie stored for bookie {bookie_id}")
        self.bookie_id = bookie_id


class NodeExistsError(MetadataError):
    """A create found the node already there (or a format found existing metadata)."""


class NotEmptyError(MetadataError):
    """A delete of a node that still has children."""


class BadVersionError(MetadataError):
    """A compare-and-swap found a different version than the caller expected."""


class CorruptMetadataError(MetadataError):
    """A stored record could not be decoded or failed validation; the message names the record."""


class AccessDeniedError(MetadataError):
    """The store refused this process access (ZooKeeper ACLs: missing or other credentials, or
    a tree protected differently from what the configuration says); the message names the key
    to set."""
