"""Whether to reach a bookie over its local sockets, and the checks that make them trusted.

Theory of operation (DESIGN.md, "Identity"; docs/security.md, "Local sockets").  A bookie's
registration publishes, beside its TCP address and CURVE key, its local sockets (``LOCAL_FIELD``:
the directory, the add and read socket paths, the bookie's uid, its host, and the uids it
admits there).  A client uses them only when all of these hold; otherwise it uses TCP with the
pinned CURVE key, and says why once per bookie (``choose``):

1. the client allows it (``useLocalSockets``, default true), and trusts the registration as
   far as it trusts its key: not where ``curveServerKeys`` pins the bookie's key (TCP proves the
   pin), nor where the registration publishes no key unless clear text is allowed
   (``bookie.client.connection``).  Whoever can write a bookie's registration can name sockets
   of its own uid, as it can name a key of its own: the metadata store's ACLs guard both;
2. the registration's host is this host: ``/etc/machine-id`` and the kernel's boot id, which two
   containers on one kernel share only if they share the machine id too (``host_identity``);
3. the bookie admits this client's uid there (the registration's ``uids``: null, every uid; a
   list, only those: ``localClientRoles``, or enrolled CURVE keys, where an unmapped uid is
   refused and must use TCP with its key);
4. ``lstat`` (no link followed) of the directory: a directory, owned by the registered uid,
   writable by nobody else; and of each socket: a socket in that directory, owned by that uid.
   Only the bookie's user can then have made the file the client connects to; whoever else
   answers a connect there could not be listening on it.

A client that uses a bookie's local sockets opens no TCP connection to it: the choice is made
per connection, and an ipc connection is the only one made.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from typing import NamedTuple

log = logging.getLogger("bookie.client")

LOCAL_FIELD = "local_sockets"  # the registration's field (a dict, or absent)
_said: set[tuple[str, str]] = set()
_said_lock = threading.Lock()
_host: str | None = None


class LocalSockets(NamedTuple):
    """What a registration publishes about a bookie's local sockets."""

    directory: str
    add: str
    read: str
    uid: int
    host: str
    uids: tuple[int, ...] | None  # None: every uid admitted


def host_identity() -> str:
    """This host as registrations name it: ``MACHINE_ID:BOOT_ID`` ("" when unknown)."""
    global _host
    if _host is None:
        parts = []
        for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
            try:
                with open(path) as f:
                    parts.append(f.read().strip())
            except OSError:
                parts.append("")
        _host = ":".join(parts) if all(parts) else ""
    return _host


def published(directory: str, add: str, read: str, uids: list[int] | None) -> dict:
    """The registration's ``LOCAL_FIELD`` of a bookie of this process's user on this host."""
    return {"directory": directory, "add": add, "read": read, "uid": os.geteuid(),
            "host": host_identity(), "uids": uids}


def parse(info: dict | None) -> LocalSockets | None:
    """The ``LocalSockets`` a registration's info dict publishes, or None (none, or malformed)."""
    field = info.get(LOCAL_FIELD) if isinstance(info, dict) else None
    if not isinstance(field, dict):
        return None
    d, a, r, uid, host = (field.get(k) for k in ("directory", "add", "read", "uid", "host"))
    uids = field.get("uids")
    if not all(isinstance(x, str) and x for x in (d, a, r, host)) or not isinstance(uid, int):
        return None
    if uids is not None and not (isinstance(uids, list) and all(isinstance(u, int) for u in uids)):
        return None
    return LocalSockets(d, a, r, uid, host, None if uids is None else tuple(uids))


def problem(local: LocalSockets, path: str) -> str | None:
    """Why the socket ``path`` of ``local`` must not be trusted on this host (rules 2-4), or
    None: connect to it."""
    if local.host != host_identity() or not local.host:
        return "registered on another host"
    if local.uids is not None and os.geteuid() not in local.uids:
        return f"uid {os.geteuid()} has no role there (localClientRoles)"
    if os.path.dirname(path) != local.directory:
        return f"socket {path} is not in the registered directory {local.directory}"
    try:
        st = os.lstat(local.directory)
    except OSError as e:
        return f"directory {local.directory}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"directory {local.directory} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{local.directory} is not a directory"
    if st.st_uid != local.uid:
        return f"directory {local.directory} is owned by uid {st.st_uid}, not the bookie's " \
               f"uid {local.uid}"
    if st.st_mode & 0o022:
        return f"directory {local.directory} is writable by group or others"
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"socket {path}: {e.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if st.st_uid != local.uid:
        return f"socket {path} is owned by uid {st.st_uid}, not the bookie's uid {local.uid}"
    return None


def choose(local: LocalSockets | None, bookie: str, kind: int, allowed: bool) -> str | None:
    """The socket path to connect to for ``bookie``'s add (``kind`` 0) or read (1) socket, or
    None: use TCP (the reason said once per bookie and reason: at debug level for another
    host's registration or a uid the bookie has no role for, else as a warning)."""
    if local is None or not allowed:
        return None
    path = local.read if kind else local.add
    why = problem(local, path)
    if why is None:
        return path
    # another host, or a uid the bookie admits only over TCP, is how things are meant to be;
    # anything else is a directory or socket that is not what the registration says
    level = logging.DEBUG if why == "registered on another host" or \
        why.endswith("(localClientRoles)") else logging.WARNING
    with _said_lock:
        if (bookie, why) in _said:
            return None
        _said.add((bookie, why))
    log.log(level, "local socket refused; using TCP with the pinned key",
            extra={"fields": {"bookie": bookie, "reason": why}})
    return None
