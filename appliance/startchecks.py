"""Checks before a bookie starts: its directories are its own to read and write, the ports it
will listen on are free (and its user may bind them), its client sockets
are not exposed beyond loopback without CURVE, and its HTTP admin API not beyond loopback
without a token (unless the operator opted out).  A refusal is ``StartRefused``: one line, exit
status 2."""

from __future__ import annotations

import errno
import os
import pwd
import re
import socket
import stat
import time

from bookie.appliance.admin.auth import TOKENLESS_WRITES
from bookie.metadata.errors import AccessDeniedError
from bookie.metadata.secret_file import MAX_SECRET_FILE_BYTES, read_private_file
from bookie.workers.config import KEYS, BookieConfig
from bookie.metadata.bookie_ids import address_id_problem
from bookie.storage.layout import all_dirs, current_dir, remembered_port

TOKEN_KEY = "httpServerAuthTokenFile"
MIN_TOKEN_CHARS = 32
# RFC 6750's b64token: what may follow "Bearer " in a header, so any such token can be sent
TOKEN = re.compile(rb"^[A-Za-z0-9._~+/-]+=*$")


class StartRefused(Exception):
    """The bookie must not start as configured (a port in use, no metadata store, its id
    registered by another live process); one line, exit status 2."""


def listening_ports(conf: BookieConfig) -> list[tuple[str, int, str]]:
    """Every TCP port the bookie will listen on: ``(key, port, what)``, the configuration key
    that names it, the port, and what listens there.  The add port, the read port
    (bookiePort + 1), and every other ``*Port`` key that is set (metrics, an admin port)."""
    ports = [("bookiePort", conf.bookie_port, "the add port"),
             ("bookiePort+1", conf.bookie_port + 1, "the read port")]
    for key in KEYS:
        if key.name.endswith("Port") and key.name != "bookiePort" and key.type == "int":
            if key.name == "httpServerPort" and not conf.http_server_enabled:
                continue  # the admin API is off: its port (default 8080) is not ours
            port = conf.value(key.name)
            if port:
                ports.append((key.name, port, ""))
    return ports


# How long a start waits for a port another process holds (a transient holder, e.g. the
# bookie's own previous run still exiting, or a client's outgoing connection that took it).
PORT_WAIT_S = 10.0
PORT_RETRY_S = 0.5


def check_ports_free(conf: BookieConfig, wait_s: float = PORT_WAIT_S, clock=None,
                     sleep=None) -> None:
    """Raise ``StartRefused`` naming each key whose port something else listens on, after
    trying again for ``wait_s`` (a holder that goes away is waited out), and who holds it
    when /proc tells (``port_holder``).  Nothing is registered before this passes."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    deadline = clock() + wait_s
    while True:
        try:
            return _check_ports_once(conf)
        except _PortsBusy as e:
            if clock() >= deadline:
                holders = [h for h in (port_holder(p) for p in e.ports) if h]
                raise StartRefused(str(e) + (f"; held by {', '.join(holders)}" if holders
                                             else "")) from None
            sleep(PORT_RETRY_S)


class _PortsBusy(StartRefused):
    def __init__(self, message: str, ports: list[int]):
        super().__init__(message)
        self.ports = ports


def port_holder(port: int) -> str | None:
    """Who listens on TCP ``port`` (``pid 123 (name) uid 1000``, or ``uid 1000`` when the
    process is not ours to see), from /proc/net/tcp{,6} and /proc/*/fd; None if unknown."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                        continue
                    if int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes[fields[9]] = int(fields[7])
        except OSError:
            continue
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    try:
                        with open(f"/proc/{pid}/comm") as f:
                            name = f.read().strip()
                    except OSError:
                        name = "?"
                    return f"pid {pid} ({name}) uid {next(iter(inodes.values()))}"
        except OSError:
            continue
    return f"uid {next(iter(inodes.values()))} (a process this user cannot see)"


def _check_ports_once(conf: BookieConfig) -> None:
    """One look: ``_PortsBusy`` naming each key whose port something else listens on now.

    A probe binds each port as ZeroMQ and http.server do (SO_REUSEADDR, so a port left in
    TIME_WAIT by our own last run counts as free) and lets it go again."""
    host = conf.listening_interface
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    busy = []
    seen: dict[int, str] = {}
    for key, port, what in listening_ports(conf):
        if port in seen:
            raise StartRefused(f"{key}={port} is also {seen[port]}: each port serves one thing")
        seen[port] = key
        if not 0 < port <= 65535:
            raise StartRefused(f"{key}={port} is not a TCP port (bookiePort must leave room "
                               f"for the read port)")
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as e:
                if e.errno == errno.EADDRNOTAVAIL:
                    raise StartRefused(f"listeningInterface={host} is not an address of this "
                                       f"host") from None
                if e.errno in (errno.EACCES, errno.EPERM):
                    raise StartRefused(
                        f"permission denied binding {key}={port} on {host}: ports below "
                        f"{_unprivileged_port_start()} need root or CAP_NET_BIND_SERVICE, and "
                        f"the bookie runs as {_owner(os.geteuid())}; configure a port of "
                        f"{_unprivileged_port_start()} or above") from None
                busy.append((f"{key}={port}" + (f" ({what})" if what else ""), port))
    if busy:
        raise _PortsBusy(f"port in use on {host}: {', '.join(b for b, _ in busy)}; stop what "
                         f"listens there or configure another port", [p for _, p in busy])


def with_stamped_port(conf: BookieConfig) -> BookieConfig:
    """``conf`` with ``bookiePort=0`` replaced by the port its directories were stamped with
    (the bookie id of its cookie), for the tools that act on a stopped bookie (updatecookie,
    rotatekey): with port 0 its id would read ``host:0``, a bookie that never existed.
    Unchanged when the port is set or the directories hold no address id."""
    if conf.bookie_port != 0:
        return conf
    port = remembered_port(all_dirs(conf))
    if port is None:
        return conf
    values = conf.as_dict()
    values["bookiePort"] = port
    return BookieConfig(values, conf.warnings)


def _unprivileged_port_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 1024


def is_loopback(host: str) -> bool:
    return host == "localhost" or host == "::1" or host.startswith("127.")


def check_client_security(conf: BookieConfig) -> tuple[str, str] | None:
    """Whether the client sockets may serve as configured: ``StartRefused`` when they would
    listen beyond loopback without CURVE (unless ``allowInsecureClients``) or a key file or the
    enrolment cannot be read; else ``(level, line)`` to log at start-up: what the client sockets
    admit (under CURVE, how many keys of each role are enrolled)."""
    from bookie.workers.auth import (  # lazy: zmq
        PLAINTEXT_ENV, AuthError, load_enrolment, load_secret, plaintext_for_bench)

    if plaintext_for_bench():  # a benchmark's baseline (workers/auth.py), on loopback only
        if not is_loopback(conf.listening_interface):
            raise StartRefused(f"{PLAINTEXT_ENV}=1 (client sockets in the clear, for a benchmark) "
                               f"is for loopback only, not listeningInterface="
                               f"{conf.listening_interface}")
        return ("warning", f"client sockets in the clear ({PLAINTEXT_ENV}=1, a benchmark's "
                           f"baseline): no key is published and nothing proves this bookie")
    if conf.curve_secret_key_file and not conf.curve_client_keys_dir:
        raise StartRefused("curveSecretKeyFile is set but curveClientKeysDirectory is not: "
                           "no client could be admitted")
    if conf.curve_client_keys_dir:
        try:
            if conf.curve_secret_key_file:
                load_secret(conf.curve_secret_key_file)
            enrolled = load_enrolment(conf.curve_client_keys_dir)
        except AuthError as e:
            raise StartRefused(str(e)) from None
        if not enrolled:
            return ("warning", f"curveClientKeysDirectory={conf.curve_client_keys_dir} enrols no "
                               f"key (reader/, writer/, admin/ hold NAME.key files): no client is "
                               f"admitted")
        roles = [role for _, role in enrolled.values()]
        counts = ", ".join(f"{roles.count(r)} {r}" for r in ("reader", "writer", "admin")
                           if r in roles)
        return ("info", f"client sockets under CURVE: {len(roles)} client keys enrolled "
                        f"({counts}) from curveClientKeysDirectory="
                        f"{conf.curve_client_keys_dir}; any other key gets no answer")
    host = conf.listening_interface
    if is_loopback(host):
        return ("info", "client sockets under CURVE with the bookie's own key (clients pin it "
                        "from the registration); no client key enrolled "
                        "(curveClientKeysDirectory): any client on this host is admitted")
    if not conf.allow_insecure_clients:
        raise StartRefused(f"listeningInterface={host} without CURVE: set curveSecretKeyFile and "
                           f"curveClientKeysDirectory (docs/security.md), or "
                           f"allowInsecureClients=true to serve in clear")
    return ("warning", exposure_warning(conf))


def exposure_warning(conf: BookieConfig) -> str | None:
    """The start-up warning of a bookie whose client sockets are reachable beyond loopback
    without CURVE (``allowInsecureClients=true``)."""
    if is_loopback(conf.listening_interface) or conf.curve_client_keys_dir:
        return None
    return ("client sockets listen beyond loopback with no authentication or encryption "
            "(allowInsecureClients=true): any client that reaches them reads every ledger, and "
            "master keys cross the network in clear; see docs/security.md")


def load_admin_token(path: str) -> bytes:
    """The token of ``httpServerAuthTokenFile``: one line (a final newline allowed) of at least
    ``MIN_TOKEN_CHARS`` b64token characters, in a private regular file.  ``StartRefused`` in
    one line naming the key and the file otherwise; the token never appears in a message."""
    try:
        raw = read_private_file(TOKEN_KEY, path)
    except AccessDeniedError as e:
        raise StartRefused(str(e)) from None
    hint = "`bookie shell gentoken FILE` makes one"
    if not raw.strip():
        raise StartRefused(f"{TOKEN_KEY}: {path} is empty; {hint}")
    token = raw[:-1] if raw.endswith(b"\n") else raw
    token = token[:-1] if token.endswith(b"\r") else token
    if len(raw) > MAX_SECRET_FILE_BYTES or not TOKEN.match(token):
        raise StartRefused(f"{TOKEN_KEY}: {path} must hold one line, the token (letters, digits, "
                           f"'-._~+/', then '=' padding); {hint}")
    if len(token) < MIN_TOKEN_CHARS:
        raise StartRefused(f"{TOKEN_KEY}: {path} holds a token of {len(token)} characters, "
                           f"at least {MIN_TOKEN_CHARS} are needed; {hint}")
    return token


def check_admin_security(conf: BookieConfig) -> tuple[bytes | None, tuple[str, str] | None]:
    """Whether the HTTP admin API may serve as configured: ``(token, note)``, the token every
    request but GET /heartbeat must carry (None: none needed) and ``(level, line)`` to log at
    start-up, or None.  ``StartRefused`` when the token file is unusable, or when the API would
    listen beyond loopback without one and ``httpServerAllowUnauthenticated`` is false."""
    if not conf.http_server_enabled:
        return None, None
    if conf.http_server_auth_token_file:
        return load_admin_token(conf.http_server_auth_token_file), None
    host = conf.http_server_host
    writes = ", ".join(f"{m} {p}" for m, p in sorted(TOKENLESS_WRITES))
    changes = (f"can read every ledger's metadata and make exactly these changes: {writes} "
               f"(force read-only, start a GC pass); every other change, and entries, need the "
               f"token")
    if is_loopback(host):
        return None, ("warning", f"admin API without authentication (no {TOKEN_KEY}): any user "
                                 f"of this host {changes}; see docs/admin.md")
    if not conf.http_server_allow_unauthenticated:
        raise StartRefused(f"httpServerHost={host or '(all addresses)'} without {TOKEN_KEY}: the "
                           f"admin API changes state; make a token with `bookie shell gentoken "
                           f"FILE` and set {TOKEN_KEY}=FILE, or httpServerAllowUnauthenticated=true "
                           f"to serve it to anyone (docs/admin.md)")
    return None, ("warning", f"admin API beyond loopback without authentication "
                             f"(httpServerAllowUnauthenticated=true): anyone who reaches "
                             f"httpServerHost={host or '(all addresses)'} {changes}")


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_dirs_usable(conf: BookieConfig) -> None:
    """Raise ``StartRefused`` naming the first file or directory under the bookie's directories
    that this process may not read and write (a file left by a tool run as root, say), whose it
    is, and the fix: a permission problem named as one, before any check reads the files and
    takes the missing access for missing data."""

    check_not_root_in_users_dirs(conf)
    for top in all_dirs(conf):
        # the top itself only until the bookie's current/ is made in it (a mount point may
        # stay root's once current/ is the bookie's)
        pending = [current_dir(top) if os.path.lexists(current_dir(top)) else top]
        while pending:
            path = pending.pop()
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not os.access(path, os.R_OK | os.W_OK | (os.X_OK if is_dir else 0)):
                _refuse_permission(path, st, top)
            if is_dir and path != top:  # below current/ only
                pending.extend(os.path.join(path, name) for name in os.listdir(path))


def check_not_root_in_users_dirs(conf: BookieConfig) -> None:
    """Root starting a bookie by hand on directories another user owns (the package's
    ``bookie``) would leave root's files there (its lock, its journal), which that user's bookie
    then cannot use: ``StartRefused`` naming the user to run as (``bookie run`` asks before it
    takes the directory lock)."""
    if os.geteuid() != 0:
        return
    for top in all_dirs(conf):
        try:
            owner = os.stat(top).st_uid
        except OSError:
            continue
        if owner == 0:
            continue
        name = _owner(owner)
        raise StartRefused(f"{top} is owned by {name}: run the bookie as {name}, not root "
                           f"(sudo -u {name} bookie run --conf FILE, or systemctl start bookie "
                           f"where it is installed)")


def _refuse_permission(path: str, st: os.stat_result, top: str) -> None:
    me = _owner(os.geteuid())
    raise StartRefused(
        f"permission denied: {path} is owned by {_owner(st.st_uid)} (mode "
        f"{st.st_mode & 0o777:04o}) and the bookie runs as {me}: a tool run as another user "
        f"wrote it; give the bookie's directories back to it (chown -R {me}: {top}) and run "
        f"the shell's storage tools as {me}")


def check_bookie_id(conf: BookieConfig) -> None:
    """A ``bookieId`` shaped like an address (``host:port``) must be this bookie's own address,
    or clients would take it for another bookie's (bookie.metadata.bookie_ids); StartRefused."""
    if conf.configured_bookie_id:
        problem = address_id_problem(conf.configured_bookie_id, conf.bookie_address)
        if problem:
            raise StartRefused(f"bookieId={conf.configured_bookie_id} {problem}")
