"""ZooKeeper security: the digest credentials a process authenticates with, and the ACL every node
it creates under the store's root gets.

Two configuration keys, the same in the bookie's and the client's configuration:

    zkEnableSecurity   BookKeeper's key: every node created gets an ACL (here: ALL to the
                       digest principal of zkDigestAuthFile, and to no one else, as ZooKeeper's
                       CREATOR_ALL_ACL); false: open ACL, as before
    zkDigestAuthFile   a file holding ``user:password`` (one line), mode 0600 or stricter: the
                       credentials sent to ZooKeeper (``addauth digest``).  Required by
                       zkEnableSecurity (SASL is not supported)

A third key, in the bookie's configuration only:

    zkBookieDigestAuthFile  a file holding the bookies' own ``user:password`` (0600), another
                       principal than zkDigestAuthFile's: the bookies authenticate with both,
                       and the recovery secret (metadata/recovery_secret.py) lives under
                       ``/PRIVATE``, whose ACL gives ALL to this principal and nothing to anyone
                       else, clients and zkDigestAuthFile's holders included

With both keys and security on, the bookies' registrations, cookies and locations
(``BOOKIES_WRITE``) are writable by the bookies' principal only, readable by the cluster's
(``acl_for``); a bookie that opens the store puts that ACL on their parents if an older
version, or a client, made them with the cluster's.

``ZkSecurity`` carries them to ``open_metadata``; ``load_zk_security`` reads and checks the file
(one-line ``AccessDeniedError`` naming the key when it is unusable, the password never shown).
``root_acl_problem`` judges the root's ACL at open (an unprotected tree with security on, a
protected one with it off, a tree of other principals), and ``protect_tree`` applies the ACL to
an existing tree (``bookie shell zkprotect``).
"""

from __future__ import annotations

import dataclasses
import re

from kazoo import exceptions as kz
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_digest_acl, \
    make_digest_acl_credential

from bookie.metadata.errors import (AccessDeniedError, MetadataError, MetadataTimeoutError,
                                    NoSuchStoreError)
from bookie.metadata.secret_file import read_private_file
from bookie.metadata.store import LAYOUT
from bookie.metadata.uri import parse_uri
from bookie.metadata.zk_errors import map_error
from bookie.metadata.zk_keys import BOOKIE_DIGEST_KEY, DIGEST_KEY, ENABLE_KEY

PRIVATE = "/PRIVATE"  # the bookies' private nodes (the recovery secret) under the root
_USER = re.compile(r"^[^:\s]+$")
# With zkBookieDigestAuthFile (and security on): the bookies' registrations (``/available``,
# ``/available/readonly``), their cookies and the locations operators set for them, each node
# and its children, are writable by the bookies' principal only and readable by the cluster's
# (clients resolve bookies through them); ZooKeeper checks creating and deleting a child
# against the parent's ACL, so no client can hold, replace or remove a bookie's node.
BOOKIES_WRITE = ("/available", "/cookies", "/bookielocations")
BOOKIES_WRITE_PARENTS = (*BOOKIES_WRITE, "/available/readonly")  # where children are made
REGISTRATIONS = ("/available", "/available/readonly")
# Turning zkBookieDigestAuthFile on (issue 39 item 5): a bookie opening the store re-ACLs every
# existing child of ``BOOKIES_WRITE_PARENTS`` too, not only the parents.  A child whose ACL is
# not the bookies-only one was not written by a bookie's principal (before the key was on, or
# by a client): one warning line each; a cookie or a location gets the bookies-only ACL (no
# client changes it from now on; a bookie's cookie is still checked against its own copy at
# its start); a registration gets the bookies' principal alone (``quarantine_acl``): clients
# can neither read nor resolve it, and ``listed`` leaves it out.  A bookie registering again
# makes its node anew with the bookies-only ACL.


@dataclasses.dataclass(frozen=True)
class ZkSecurity:
    """Credentials (``user``/``password`` of the digest scheme) and whether nodes get the ACL."""

    enabled: bool = False
    user: str = ""
    password: str = dataclasses.field(default="", repr=False)
    source: str = ""  # the file the credentials came from, for messages
    bookie_user: str = ""  # zkBookieDigestAuthFile's: the bookies' own principal
    bookie_password: str = dataclasses.field(default="", repr=False)

    @property
    def auth_data(self) -> list[tuple[str, str]] | None:
        """kazoo's ``auth_data``: the digest credentials, or None when there are none."""
        auth = [("digest", f"{self.user}:{self.password}")] if self.user else []
        if self.bookie_user:
            auth.append(("digest", f"{self.bookie_user}:{self.bookie_password}"))
        return auth or None

    @property
    def bookie_acl(self) -> list[ACL] | None:
        """The ACL of the bookies' private nodes: ALL to the bookies' principal only (None:
        no such principal configured)."""
        return [make_digest_acl(self.bookie_user, self.bookie_password, all=True)] \
            if self.bookie_user else None

    @property
    def bookies_only_acl(self) -> list[ACL] | None:
        """The ACL of what only bookies may change, which clients read (``BOOKIES_WRITE``):
        ALL to the bookies' principal, READ to the cluster's; None (the tree's default ACL)
        unless security is on and the bookies have a principal of their own."""
        if not (self.enabled and self.bookie_user and self.user):
            return None
        return [make_digest_acl(self.bookie_user, self.bookie_password, all=True),
                make_digest_acl(self.user, self.password, read=True)]

    @property
    def principal(self) -> str:
        """The ZooKeeper id these credentials authenticate as (``digest:user:base64(sha1)``)."""
        return "digest:" + make_digest_acl_credential(self.user, self.password) if self.user else ""

    @property
    def acl(self) -> list[ACL] | None:
        """The ACL of every node created: ALL to this principal only; None (open) when off."""
        return [make_digest_acl(self.user, self.password, all=True)] if self.enabled else None


def acl_for(relative_path: str, security: ZkSecurity | None) -> list[ACL] | None:
    """The ACL a node created at ``relative_path`` (under the root) gets: the bookies-only ACL
    at and under ``BOOKIES_WRITE``, else None (the client's default: ``security.acl``)."""
    if security is None:
        return None
    for top in BOOKIES_WRITE:
        if relative_path == top or relative_path.startswith(top + "/"):
            return security.bookies_only_acl
    return None


def child_acl(top: str, security: "ZkSecurity") -> list[ACL] | None:
    """The ACL an existing child of ``top`` (one of ``BOOKIES_WRITE_PARENTS``) gets when its
    ACL is not the bookies-only one: a registration is quarantined (the bookies' principal
    alone), a cookie or a location gets the bookies-only ACL."""
    return security.bookie_acl if top in REGISTRATIONS else security.bookies_only_acl


def read_only_entry(acls) -> bool:
    """Whether an ACL gives some principal READ alone: the bookies-only ACL's mark (the
    cluster's principal reads what the bookies write)."""
    return any(a.perms == Permissions.READ for a in acls)


def listed(parent_acls, child_acls) -> bool:
    """Whether a registration is listed: under a parent with the bookies-only ACL, only a child
    with that same ACL (a bookie made it: ZooKeeper lets no one else create there); under any
    other parent (no bookies' principal), every child, as before."""
    if not read_only_entry(parent_acls):
        return True
    return child_acls is not None and _ids(child_acls) == _ids(parent_acls)


def load_zk_security(enabled: bool, auth_file: str, key: str = DIGEST_KEY) -> ZkSecurity | None:
    """The security of a configuration (None: no credentials, security off).

    Raises:
        AccessDeniedError: zkEnableSecurity without zkDigestAuthFile, or the file is missing,
            unreadable, readable or writable by group/other, or not one ``user:password`` line.
    """
    if not auth_file:
        if enabled:
            raise AccessDeniedError(f"{ENABLE_KEY}=true needs {DIGEST_KEY}: a file (mode 0600) "
                                    f"holding the cluster's ZooKeeper credentials user:password")
        return None
    raw = read_private_file(key, auth_file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "\x00"
    lines = text.splitlines() or [""]
    user, sep, password = lines[0].strip("\r").partition(":")
    if (len(raw) > 4096 or len(lines) != 1 or not sep or not _USER.match(user) or not password
            or password != password.strip() or "\x00" in text):
        raise AccessDeniedError(f"{key}: {auth_file} must hold one line user:password "
                                f"(a user without ':' or blanks, a non-empty password)")
    return ZkSecurity(enabled=bool(enabled), user=user, password=password, source=auth_file)


def with_bookie_credentials(security: ZkSecurity | None, auth_file: str) -> ZkSecurity | None:
    """``security`` plus the bookies' own principal of ``zkBookieDigestAuthFile`` (checked as
    zkDigestAuthFile is); ``security`` itself when ``auth_file`` is empty."""
    if not auth_file:
        return security
    own = load_zk_security(False, auth_file, key=BOOKIE_DIGEST_KEY)
    if security is not None and own.user == security.user:
        raise AccessDeniedError(f"{BOOKIE_DIGEST_KEY}: the user {own.user!r} is the one of "
                                f"{DIGEST_KEY}: the bookies need a principal of their own")
    return dataclasses.replace(security or ZkSecurity(), bookie_user=own.user,
                               bookie_password=own.password)


def _ids(acls) -> dict[str, int]:
    return {f"{a.id.scheme}:{a.id.id}": a.perms for a in acls}


def root_acl_problem(root: str, acls, security: ZkSecurity | None) -> str | None:
    """Why a store with these settings must not be used on a root with ACL ``acls`` (None: fine).

    Security on: the root must give ALL to our principal and nothing to ``world:anyone``.
    Security off: the root must be open, otherwise the nodes created would be open ones in a
    protected tree."""
    ids = _ids(acls)
    open_tree = "world:anyone" in ids
    if security is not None and security.enabled:
        if open_tree:
            return (f"the metadata under {root} is not protected (its ACL is open) but "
                    f"{ENABLE_KEY} is true: protect it with 'bookie shell zkprotect' "
                    f"(or set {ENABLE_KEY}=false)")
        if ids.get(security.principal, 0) & Permissions.ALL != Permissions.ALL:
            return (f"the metadata under {root} is protected for {', '.join(sorted(ids))}, not "
                    f"for the user {security.user!r} of {DIGEST_KEY} ({security.source}): set "
                    f"{DIGEST_KEY} to the cluster's credentials")
        return None
    if not open_tree:
        if security is None:
            return (f"ZooKeeper protects the metadata under {root} (ACL): set {DIGEST_KEY} to "
                    f"the cluster's credentials and {ENABLE_KEY}=true")
        return (f"the metadata under {root} is protected (ACL) but {ENABLE_KEY} is false: set "
                f"{ENABLE_KEY}=true so that the nodes created are protected too")
    return None


def refused_with(root: str, security: ZkSecurity | None) -> str | None:
    """The message for a root that refuses even to show its ACL to these credentials (None:
    there are none, the generic NoAuth message says it)."""
    if security is None or not security.user:
        return None
    return (f"ZooKeeper refused access to {root} (NoAuth) for the user {security.user!r} of "
            f"{DIGEST_KEY} ({security.source}): set {DIGEST_KEY} to the cluster's credentials")


def above_root_acl() -> list[ACL]:
    """The ACL of nodes created above the root (``/a`` of root ``/a/b``): open, as they hold no
    data and may be shared with other clusters and tools."""
    return OPEN_ACL_UNSAFE


def protect_tree(client, root: str, security: ZkSecurity) -> int:
    """Give the root and every node under it ``security.acl``; return how many nodes were set.
    ``client`` is a started kazoo client authenticated with ``security``'s credentials.
    Nodes created meanwhile by processes with security off may be missed: run it again."""
    count = 0
    todo = [root]
    while todo:
        path = todo.pop()
        if path == root + PRIVATE:
            continue  # the bookies' own (their principal's ACL), not the cluster's
        try:
            client.set_acls(path, acl_for(path[len(root):], security) or security.acl)
            kids = client.get_children(path)
        except kz.NoNodeError:
            continue  # deleted meanwhile (an ephemeral node, an id)
        count += 1
        todo.extend(f"{path}/{k}" for k in kids)
    return count


def protect_metadata(uri: str, security: ZkSecurity | None, timeout_s: float = 10.0) -> int:
    """Apply ``security``'s ACL to the ZooKeeper store at ``uri`` (``bookie shell zkprotect``):
    the root and every node under it.  Returns the number of nodes set.

    Raises:
        AccessDeniedError: no credentials, or ZooKeeper refuses (a tree of other principals).
        NoSuchStoreError: the root holds no metadata store.
        MetadataError: not a ZooKeeper URI; MetadataTimeoutError: unreachable.
    """
    from kazoo.client import KazooClient  # lazy: kazoo.client
    parsed = parse_uri(uri)
    if parsed.scheme == "lmdb":
        raise MetadataError(f"{uri}: the embedded store has no ACLs (its files are the bookie "
                            f"user's alone); zkprotect is for ZooKeeper")
    if security is None:
        raise AccessDeniedError(f"zkprotect needs the cluster's credentials: --zk-digest-auth-file "
                                f"FILE or a --conf file with {DIGEST_KEY}")
    security = dataclasses.replace(security, enabled=True)
    hosts = ",".join(parsed.hosts)
    client = KazooClient(hosts=hosts, timeout=timeout_s, auth_data=security.auth_data,
                         default_acl=security.acl)
    try:
        client.start(timeout=timeout_s)
    except client.handler.timeout_exception:
        client.close()
        raise MetadataTimeoutError(f"cannot reach ZooKeeper at {hosts} within {timeout_s:g} s") \
            from None
    try:
        if client.exists(parsed.root + LAYOUT) is None:
            raise NoSuchStoreError(uri, f"ZooKeeper at {hosts} holds no metadata store under "
                                        f"{parsed.root}")
        return protect_tree(client, parsed.root, security)
    except kz.KazooException as e:
        raise map_error(e, parsed.root) from None
    finally:
        client.stop()
        client.close()
