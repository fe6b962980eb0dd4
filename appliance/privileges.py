"""Offline tools that write into a bookie's directories run as the directories' owner.

The rule: a file a tool writes under a bookie's directories (index, cookie, VERSION, a
directory lock, an embedded metadata store) must stay usable by the bookie, which runs as the
directories' owner (``bookie`` in the package).  A tool started as root therefore becomes that
owner before it opens anything there: ``os.setgroups`` / ``setgid`` / ``setuid`` in this
process, after every import it needs (the interpreter may live where that user cannot read,
a home directory), never by re-running itself as the user.  When the owner cannot be told
(the directories belong to different users) it refuses in one line naming the users to run it
as, exit status 2, before anything is written.  A tool started as any other user runs as it is:
what it cannot write is refused by the system, and the bookie's start check names a permission
problem as one (``startchecks.check_dirs_usable``).

The files it writes get the bookie's own mode (umask 0077, as the unit's ``UMask=``).
Read-only tools follow the same rule (issue 33): LMDB makes a lock file even to read, and a
root process opening a file the bookie's user can replace by a link would write where that
user points; as the owner, a tool can only touch what the owner could.
"""

from __future__ import annotations

import importlib
import os
import pwd

from bookie.appliance.errors import CliError
from bookie.metadata.errors import InvalidUriError
from bookie.metadata.uri import parse_uri

BOOKIE_UMASK = 0o077
# Modules imported lazily on first use by the libraries the tools use (py-lmdb loads its
# environment-identity helper when an environment is opened): loaded before the switch.
LAZY_MODULES = ("lmdb", "lmdb._envid", "encodings.idna")


def _existing(path: str) -> str:
    """``path`` or, when it does not exist yet, its nearest existing ancestor (whose owner
    decides who creates it)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def owner_of(dirs: list[str]) -> tuple[int, int]:
    """The ``(uid, gid)`` owning the bookie's directories (each, or where it will be made).

    Raises:
        CliError: they belong to different users (one line naming them).
    """
    owners = {}
    for d in dirs:
        st = os.stat(_existing(d))
        owners.setdefault(st.st_uid, (st.st_uid, st.st_gid, d))
    if len(owners) > 1:
        named = ", ".join(f"{d} by {_user(uid)}" for uid, _, d in owners.values())
        raise CliError(f"the bookie's directories belong to different users ({named}): "
                       f"chown them to the bookie's user and run this as that user "
                       f"(sudo -u USER)")
    uid, gid, _ = next(iter(owners.values()))
    return uid, gid


def run_as_owner(dirs: list[str], tool: str) -> str | None:
    """Become the owner of ``dirs`` when this process is root; set the bookie's umask.

    Call after the imports the tool needs and before it opens anything under ``dirs``.

    Returns:
        the user name now run as, or None when nothing changed (not root, or root's dirs).
    Raises:
        CliError: the owner cannot be told, or the switch is refused; one line naming the user
            to run ``tool`` as.
    """
    os.umask(BOOKIE_UMASK)
    if os.geteuid() != 0:
        return None
    uid, gid = owner_of(dirs)
    if uid == 0:
        return None
    for module in LAZY_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:  # not in this version of the library: nothing to load
            pass
    name = _user(uid)
    try:
        try:
            entry = pwd.getpwuid(uid)
            groups = os.getgrouplist(entry.pw_name, gid)
        except KeyError:  # an owner with no passwd entry: its directory's group only
            groups = [gid]
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
    except OSError as e:
        raise CliError(f"{tool} must run as {name}, the owner of the bookie's directories "
                       f"(sudo -u {name} bookie shell {tool} ...): switching to it failed: "
                       f"{e.strerror}") from None
    return name


def run_as_store_owner(uri: str, tool: str) -> str | None:
    """``run_as_owner`` for an embedded metadata store (``lmdb:///path``): a tool started as
    root that opens one becomes the owner of its directory first, so LMDB's lock file and
    whatever the store writes stay the bookie's.  A ZooKeeper URI changes nothing."""
    try:
        parsed = parse_uri(uri)
    except InvalidUriError:
        return None  # refused by the store's own opening, in its words
    if parsed.scheme != "lmdb":
        return None
    return run_as_owner([parsed.path], tool)
