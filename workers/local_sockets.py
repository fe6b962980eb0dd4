"""The bookie's local sockets: ZeroMQ ``ipc://`` endpoints beside its TCP ports, for clients on
its own host, where the kernel vouches for both ends (docs/security.md, "Local sockets").

Theory of operation
-------------------
Both client sockets (add, read) also bind ``DIR/PORT.add`` and ``DIR/PORT.read`` in the
directory ``localSocketDirectory`` (``DIR``).  A client trusts what answers there because only
the bookie's user can make a file in ``DIR`` (checked by the client with ``lstat``:
``bookie.client.local_sockets``); the bookie learns who calls from the socket itself: libzmq
hands ``SO_PEERCRED``'s ``uid:gid:pid`` to the ZAP handler as the peer's address, and the
handler makes the uid the connection's principal (``uid:N``, ``bookie.workers.auth``).

Rules kept here (``prepare``, by the supervisor before any worker starts):

1. ``DIR`` is a directory owned by the bookie's user, not a link, writable by nobody else
   (mode 0755 or tighter), every parent searchable by all (local clients of every uid must
   reach it: roles and shares are decided by uid, not by file modes).  The sockets are made
   mode 0777 after their bind whatever the umask (``open_to_all``).
2. A socket path longer than ``sun_path`` allows (107 bytes) is refused, naming the key.
3. A file left at a socket's path is removed only when this user owns it, it is a socket, and
   nothing listens on it (a connect is refused); otherwise the start is refused (another
   bookie on this port, or a file someone else made).
4. The key unset: the default ``/run/bookie``; when it cannot be made or is not the bookie
   user's, one warning and the bookie serves over TCP only.  Set explicitly, an unusable
   directory refuses the start (``LocalSocketError``: the supervisor's exit 2), after the data
   directories' own checks.  ``none``: no local sockets.

``localClientRoles`` maps uids (or user names) to the roles of docs/security.md
(``parse_roles``).
"""

from __future__ import annotations

import os
import pwd
import socket
import stat

DEFAULT_DIRECTORY = "/run/bookie"
OFF = "none"
SUN_PATH_MAX = 107  # bytes of a path a sockaddr_un holds, its terminating NUL left out
ROLES = ("reader", "writer", "admin")


class LocalSocketError(ValueError):
    """An explicitly configured local socket directory that cannot be used; one line naming the
    key and the cause."""


def socket_paths(directory: str, port: int) -> tuple[str, str]:
    """(add socket path, read socket path) of the bookie on ``port`` in ``directory``."""
    return os.path.join(directory, f"{port}.add"), os.path.join(directory, f"{port}.read")


def endpoint(path: str) -> str:
    return f"ipc://{path}"


def parse_roles(text: str) -> dict[int, str]:
    """``localClientRoles`` (``UID_OR_USER:ROLE,...``) -> uid -> role.

    Raises:
        ValueError: one line naming the bad entry (an unknown user, an unknown role, a uid
            given twice).
    """
    out: dict[int, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        who, sep, role = item.rpartition(":")
        who, role = who.strip(), role.strip()
        if not sep or not who:
            raise ValueError(f"entry {item!r} is not UID:ROLE or USER:ROLE")
        if role not in ROLES:
            raise ValueError(f"entry {item!r}: role {role!r} is not one of {', '.join(ROLES)}")
        if who.isdigit():
            uid = int(who)
        else:
            try:
                uid = pwd.getpwnam(who).pw_uid
            except KeyError:
                raise ValueError(f"entry {item!r}: no user {who!r} on this host") from None
        if uid in out:
            raise ValueError(f"entry {item!r}: uid {uid} is given a role twice")
        out[uid] = role
    return out


def roles_problem(text: str) -> str | None:
    """The configuration check of ``localClientRoles``: a complaint or None."""
    try:
        parse_roles(text)
    except ValueError as e:
        return str(e)
    return None


def directory_problem(directory: str, uid: int | None = None) -> str | None:
    """Why ``directory`` cannot hold this bookie's local sockets (rule 1), or None.  ``uid``:
    the owner it must have (default: this process's effective uid)."""
    uid = os.geteuid() if uid is None else uid
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return f"{directory} does not exist"
    except OSError as e:
        return f"{directory}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{directory} is a symbolic link (a link is never followed)"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != uid:
        return f"{directory} is owned by uid {st.st_uid}, not the bookie's user (uid {uid})"
    if st.st_mode & 0o022:
        return f"{directory} is writable by group or others (mode {st.st_mode & 0o777:04o})"
    path = directory
    while True:  # every client must reach the sockets: each directory searchable by all
        try:
            mode = os.stat(path).st_mode
        except OSError as e:
            return f"{path}: {e.strerror}"
        if not mode & 0o001:
            return f"{path} is not searchable by others (mode {mode & 0o777:04o}): local " \
                   f"clients of other users could not reach the sockets"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def _listening(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def stale_problem(path: str) -> str | None:
    """Remove a stale socket at ``path`` (rule 3); the reason it must stay, or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not the bookie's user"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if _listening(path):
        return f"something listens on {path} (another bookie on this port?)"
    os.unlink(path)
    return None


def prepare(configured: str, port: int) -> tuple[str, str | None]:
    """The directory this bookie's local sockets go in, made ready (rules 1-4).

    Returns:
        (directory, warning): directory "" when the bookie serves over TCP only (the key is
        ``none``, or the default could not be used: ``warning`` says why, once).
    Raises:
        LocalSocketError: the key names a directory that cannot be used.
    """
    if configured == OFF:
        return "", None
    directory = configured or DEFAULT_DIRECTORY
    try:
        _prepare(directory, port)
    except LocalSocketError as e:
        if configured:
            raise
        return "", f"{e}; serving over TCP only"
    return directory, None


def _prepare(directory: str, port: int) -> None:
    key = "localSocketDirectory"
    for path in socket_paths(directory, port):
        if len(os.fsencode(path)) > SUN_PATH_MAX:
            raise LocalSocketError(f"{key}={directory}: socket path {path} is longer than "
                                   f"{SUN_PATH_MAX} bytes (the sun_path limit); use a shorter "
                                   f"directory")
    if not os.path.lexists(directory):
        try:
            os.mkdir(directory, 0o755)
            os.chmod(directory, 0o755)  # whatever the umask
        except OSError as e:
            raise LocalSocketError(f"{key}={directory}: cannot make it: {e.strerror}") from None
    problem = directory_problem(directory)
    if problem:
        raise LocalSocketError(f"{key}: {problem}")
    for path in socket_paths(directory, port):
        problem = stale_problem(path)
        if problem:
            raise LocalSocketError(f"{key}: {problem}")


def open_to_all(path: str) -> None:
    """Let every local uid connect to the socket just bound at ``path`` (rule 1): connecting
    to a Unix socket needs write permission on it, and the bookie's umask is 077."""
    os.chmod(path, 0o777)
