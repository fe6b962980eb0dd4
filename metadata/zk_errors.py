"""kazoo's exceptions as the metadata store's errors (``map_error``), one line each."""

from __future__ import annotations

from kazoo import exceptions as kz

from bookie.metadata.errors import (
    AccessDeniedError, BadVersionError, MetadataError, NodeExistsError, NoSuchNodeError,
    NotEmptyError)
from bookie.metadata.zk_keys import DIGEST_KEY, ENABLE_KEY


def map_error(e: Exception, what: str) -> MetadataError:
    """The store's error for kazoo exception ``e`` met on ``what`` (a path or an operation)."""
    if isinstance(e, kz.NoNodeError):
        return NoSuchNodeError(f"no node {what}")
    if isinstance(e, kz.NodeExistsError):
        return NodeExistsError(f"node {what} already exists")
    if isinstance(e, kz.BadVersionError):
        return BadVersionError(f"{what}: version does not match")
    if isinstance(e, kz.NotEmptyError):
        return NotEmptyError(f"{what} has children")
    if isinstance(e, kz.NoChildrenForEphemeralsError):
        return MetadataError(f"{what}: an ephemeral parent cannot have children")
    if isinstance(e, kz.ConnectionClosedError):
        return MetadataError("metadata store is closed")
    if isinstance(e, kz.NoAuthError):
        return AccessDeniedError(f"ZooKeeper refused access to {what} (NoAuth): set {DIGEST_KEY} "
                                 f"to the cluster's credentials (and {ENABLE_KEY}=true)")
    if isinstance(e, kz.AuthFailedError):
        return AccessDeniedError(f"ZooKeeper rejected the credentials (AuthFailed) on {what}: "
                                 f"check {DIGEST_KEY}")
    if isinstance(e, kz.InvalidACLError):
        return AccessDeniedError(f"ZooKeeper refused the ACL of {what} (InvalidACL): check "
                                 f"{DIGEST_KEY} and {ENABLE_KEY}")
    return MetadataError(f"{what}: {type(e).__name__}: {e}")
