"""Metadata service URIs: which backend, where, and (for ZooKeeper) which ledger layout.

    zk://host:port[,host:port...][/root]              ZooKeeper; layout: the one the root was
                                                      formatted with, hierarchical if none yet
    zk+flat://...  zk+hierarchical://...              ZooKeeper with that layout, insisted on
    lmdb:///abs/path                                  the embedded LMDB store in that directory

The ZooKeeper root defaults to ``/ledgers`` and may not be ``/`` itself (a forced format wipes
everything under the root).
"""

from __future__ import annotations

import dataclasses
import re

from bookie.metadata.errors import InvalidUriError

DEFAULT_ZK_ROOT = "/ledgers"
_ZK_SCHEMES = {"zk": None, "zk+flat": "flat", "zk+hierarchical": "hierarchical"}
# The one list of schemes: every check of a metadataServiceUri (bookie, client, shell) uses it.
SCHEMES = (*_ZK_SCHEMES, "lmdb")
SCHEMES_HELP = ("lmdb:///abs/path, zk://host:port[,host:port]/root, zk+flat:// or "
                "zk+hierarchical://")


def known_scheme(uri: str) -> bool:
    """Whether ``uri`` starts with one of ``SCHEMES`` and "://" (the rest is ``parse_uri``'s)."""
    return uri.split("://", 1)[0].lower() in SCHEMES and "://" in uri
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):(\d{1,5})$")
_ZK_SEGMENT = re.compile(r"^[^/\x00]+$")


@dataclasses.dataclass(frozen=True)
class MetadataUri:
    """A parsed metadata service URI."""

    scheme: str                     # "zk" or "lmdb"
    hosts: tuple[str, ...] = ()     # zk: "host:port" each
    root: str = DEFAULT_ZK_ROOT     # zk: the root node of this cluster's metadata
    layout: str | None = None       # zk: "flat", "hierarchical", or None = as formatted
    path: str = ""                  # lmdb: absolute directory of the environment
    text: str = ""                  # the URI as given, for messages


def parse_uri(uri: str) -> MetadataUri:
    """Parse a metadata service URI; raise ``InvalidUriError`` with the reason if it is not one."""
    if not isinstance(uri, str) or "://" not in uri:
        raise InvalidUriError(f"{uri!r} is not a metadata service URI (expected zk://host:port/root "
                              f"or lmdb:///abs/path)")
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if "?" in rest or "#" in rest:
        raise InvalidUriError(f"{uri!r}: query strings and fragments are not supported")
    if scheme == "lmdb":
        if not rest.startswith("/") or rest.startswith("//") or rest == "/":
            raise InvalidUriError(f"{uri!r}: expected lmdb:///absolute/path (empty host, absolute "
                                  f"directory)")
        return MetadataUri(scheme="lmdb", path=rest.rstrip("/"), text=uri)
    if scheme not in _ZK_SCHEMES:
        raise InvalidUriError(f"{uri!r}: unknown scheme {scheme!r} (use {', '.join(SCHEMES[:-1])} "
                              f"or {SCHEMES[-1]})")
    hostpart, slash, root = rest.partition("/")
    hosts = tuple(h.strip() for h in hostpart.split(",") if h.strip())
    if not hosts:
        raise InvalidUriError(f"{uri!r}: no ZooKeeper server given (zk://host:port/root)")
    for host in hosts:
        m = _HOST_PORT.match(host)
        if not m or not 0 < int(m.group(2)) <= 65535:
            raise InvalidUriError(f"{uri!r}: {host!r} is not host:port")
    root = "/" + root.strip("/") if slash and root.strip("/") else DEFAULT_ZK_ROOT
    if slash and rest.endswith("/") and rest.rstrip("/") == hostpart:
        raise InvalidUriError(f"{uri!r}: the root may not be '/' (give a path such as /ledgers)")
    if not all(_ZK_SEGMENT.match(seg) and seg not in (".", "..") and seg != "zookeeper"
               for seg in root.strip("/").split("/")):
        raise InvalidUriError(f"{uri!r}: {root!r} is not a usable ZooKeeper root path")
    return MetadataUri(scheme="zk", hosts=hosts, root=root, layout=_ZK_SCHEMES[scheme], text=uri)
