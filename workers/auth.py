"""CurveZMQ on the client sockets: the bookie's keypair, the enrolled client keys, their roles.

Theory of operation
-------------------
Both client sockets (add, read) are always CURVE servers with the bookie's own keypair
(``bookie.storage.server_key``: ``curveSecretKeyFile`` when set, else the key the bookie made at
its first start), the key its registration publishes and clients pin: whatever answers on the
bookie's ports without that key is treated as down by every client.  Every connection is
encrypted.  ``ServerCurve`` sets that up, once per worker: ``server_curve(conf)``, then
``start`` before binding, ``secure`` on each client socket, ``stop`` before the context ends.

Without ``curveClientKeysDirectory`` no client key is enrolled: any client key is admitted (a
client makes an ephemeral one), no ZAP handler runs, and the principal of a request stays its
peer address (``bookie.core.shares``): an ephemeral key is never an identity.  This is what a
bookie on loopback does by default (``appliance.startchecks`` refuses it beyond loopback unless
``allowInsecureClients``).

With ``curveClientKeysDirectory`` set, the client also proves it holds the secret half of an
enrolled public key.  Which keys may connect is decided by a ZAP handler, a thread of the worker bound to ZeroMQ's
``inproc://zeromq.zap.01`` in the worker's context: ZeroMQ asks it once per connection, during the
handshake.  A key not enrolled is denied there, the handshake fails, and the connection never
carries a request: an unknown key gets no answer at all.

Enrolment is a directory, ``curveClientKeysDirectory``, with one subdirectory per role; each holds
public key files as ``bookie shell genkey`` writes them (``NAME.key``).  The principal is the
key itself, not its file's name: the handler answers ZeroMQ with the public key (z85) as the
connection's User-Id; every message from that connection carries it, ``Gate.refusal`` maps it
to its role for each request, and the workers count a principal's pending places by it
(``bookie.core.shares``).  NAME is what logs and messages call the key; one NAME is one key
in one role: the same NAME in two roles, or one key in two files, is refused at load (one
line), and left out (a warning) at a reload.  Were the name the principal, ``reader/app.key``
of one key and ``admin/app.key`` of another would give the reader's key admin rights, and a
key whose file was removed would keep its open connections while another key of that name
stayed enrolled.  The roles:

    reader   READ, READ_LAC (long polls too), INFO
    writer   the reader's, plus ADD (recovery adds too), WRITE_LAC, FORCE_LEDGER, and the FENCE flag
    admin    everything a writer may, plus the RECOVERY_CREDENTIAL flag (autorecovery's
             recovery adds and fences on the cluster recovery credential)

The bookie's own public key counts as admin here even when not enrolled (its autorecovery
worker connects with it); enrol each bookie's key as admin at the others.  Deleting ledgers
and formatting do not pass these sockets (metadata store, local shell).  A request its role does
not allow is answered UNAUTHORIZED and does nothing.

Enrolment changes without a restart (``Enrolment``): each worker looks at the directory again
when a handshake or a request comes and ``RELOAD_INTERVAL_S`` has passed since it last looked,
and re-reads the keys when a listing changed (a ``.key`` file added, removed, moved between
roles, or rewritten: its name, inode, size or mtime).  A key removed (or moved out) is denied at
its next handshake, and every further request on a connection it already has open is refused
UNAUTHORIZED: ``Gate.refusal`` maps the principal through the enrolment as it is now.  A key
added is admitted at its next handshake.  A file that cannot be read at a reload is left out
(a warning names it) rather than keeping what was there before; at start it stops the worker.
"""

from __future__ import annotations

import os
import threading
import time

import zmq
import zmq.auth
import zmq.utils.z85

from bookie.storage import server_key
from bookie.workers import local_sockets
from bookie.wire import Bits, Op

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"bookie"
LOCAL_DOMAIN = b"bookie-local"  # the ipc endpoints' (NULL mechanism): the handler names the uid
LOCAL_PREFIX = "uid:"  # a local connection's principal: uid:N (its User-Id)
ROLES = ("reader", "writer", "admin")
READER_OPS = frozenset((Op.READ, Op.READ_LAC, Op.INFO))
# Longest a removed key keeps working after its file went (docs/security.md): the enrolment
# directory is listed at most this often, and only while handshakes or requests come.
RELOAD_INTERVAL_S = 1.0


class AuthError(ValueError):
    """A key file or enrolment directory that cannot be used; one line naming it."""


def load_secret(path: str) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a secret key file."""
    try:
        return server_key.load(path, hint=" (use NAME.key_secret)")
    except server_key.ServerKeyError as e:
        raise AuthError(str(e)) from None


def load_enrolment(directory: str, on_bad=None) -> dict[bytes, tuple[str, str]]:
    """Public key (z85) -> (NAME, role), from ``directory/ROLE/NAME.key``.

    ``on_bad(message)``: called for a key file that cannot be read (or a missing directory), or
    for a NAME in two roles or a key in two files (all of them then left out); None: raise
    AuthError instead.
    """
    if not os.path.isdir(directory):
        if on_bad is None:
            raise AuthError(f"curveClientKeysDirectory={directory} is not a directory")
        on_bad(f"curveClientKeysDirectory={directory} is not a directory")
        return {}
    found: list[tuple[bytes, str, str]] = []  # (key, NAME, role) of every readable file
    for role in ROLES:
        sub = os.path.join(directory, role)
        if not os.path.isdir(sub):
            continue
        for name in sorted(os.listdir(sub)):
            if not name.endswith(".key"):
                continue
            try:
                public, _ = zmq.auth.load_certificate(os.path.join(sub, name))
            except (OSError, ValueError) as e:
                if on_bad is None:
                    raise AuthError(f"enrolled key {os.path.join(sub, name)}: {e}") from None
                on_bad(f"enrolled key {os.path.join(sub, name)}: {e}")
                continue
            found.append((public, name[:-len(".key")], role))
    return _without_duplicates(directory, found, on_bad)


def _without_duplicates(directory: str, found, on_bad) -> dict[bytes, tuple[str, str]]:
    """The enrolment of ``found``, refusing (or leaving out) a NAME in two roles and a key in
    two files: each would make a principal's role depend on which file is read last."""
    roles_of: dict[str, list[str]] = {}
    files_of: dict[bytes, list[str]] = {}
    for public, name, role in found:
        roles_of.setdefault(name, []).append(role)
        files_of.setdefault(public, []).append(f"{role}/{name}.key")
    bad_names = {n for n, r in roles_of.items() if len(r) > 1}
    bad_keys = {k for k, f in files_of.items() if len(f) > 1}
    for name in sorted(bad_names):
        message = (f"curveClientKeysDirectory={directory}: the name {name!r} is enrolled in "
                   f"{' and '.join(r + '/' for r in roles_of[name])}: one name is one key in one "
                   f"role; remove or rename all but one")
        if on_bad is None:
            raise AuthError(message)
        on_bad(message)
    for key in sorted(bad_keys):
        message = (f"curveClientKeysDirectory={directory}: one key is enrolled as "
                   f"{' and '.join(files_of[key])}: keep one file per key")
        if on_bad is None:
            raise AuthError(message)
        on_bad(message)
    return {public: (name, role) for public, name, role in found
            if name not in bad_names and public not in bad_keys}


def _listing(directory: str) -> tuple:
    """What a change of enrolment changes: each role's ``.key`` files with inode, size, mtime."""
    out = []
    for role in ROLES:
        try:
            with os.scandir(os.path.join(directory, role)) as it:
                files = sorted((e.name, e.inode(), *_size_mtime(e)) for e in it
                               if e.name.endswith(".key"))
        except OSError:
            files = None
        out.append(files)
    return tuple(out)


def _size_mtime(entry) -> tuple[int, int]:
    try:
        st = entry.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


class Enrolment:
    """The enrolled keys of one directory, as they are now (module doc: "without a restart").

    ``keys`` (public key -> (NAME, role)) and ``roles`` (principal, the key as the User-Id
    carries it -> role) are one consistent pair, replaced together.  Thread-safe: the ZAP thread and the worker's loop both
    call ``refresh``; one re-reads at a time, the other uses the pair it finds.
    """

    def __init__(self, directory: str, interval_s: float = RELOAD_INTERVAL_S,
                 clock=time.monotonic, log=None, always: dict | None = None):
        self.directory = directory
        self.always = dict(always or {})  # keys enrolled whatever the directory holds
        self.interval_s = interval_s
        self.clock = clock
        self.log = log  # log(event, level=..., **fields); set by ServerCurve.start
        self._listing = _listing(directory)
        self._state = self._pair(self._with_always(load_enrolment(directory)))  # unreadable: AuthError
        self._checked = clock()
        self._lock = threading.Lock()
        self.reloads = 0

    def _with_always(self, keys: dict) -> dict:
        for public, who in self.always.items():
            keys.setdefault(public, who)
        return keys

    @staticmethod
    def _pair(keys: dict) -> tuple[dict, dict]:
        return keys, {public.decode("ascii"): role for public, (_, role) in keys.items()}

    @property
    def names(self) -> dict[str, str]:
        """Principal (the key, as the User-Id carries it) -> NAME, for messages."""
        return {public.decode("ascii"): name for public, (name, _) in self.keys.items()}

    @property
    def keys(self) -> dict[bytes, tuple[str, str]]:
        return self._state[0]

    @property
    def roles(self) -> dict[str, str]:
        return self._state[1]

    def refresh(self) -> tuple[dict, dict]:
        """(keys, roles) as the directory holds them now, looked at most every interval_s."""
        now = self.clock()
        if now - self._checked >= self.interval_s and self._lock.acquire(blocking=False):
            try:
                self._checked = now
                listing = _listing(self.directory)
                if listing != self._listing:
                    self._listing = listing
                    self._reload()
            finally:
                self._lock.release()
        return self._state

    def _reload(self) -> None:
        def bad(message: str) -> None:
            self._log("enrolled client key left out", level="warning", error=message)
        before = {name: role for name, role in self.keys.values()}  # by NAME, for the log
        self._state = self._pair(self._with_always(load_enrolment(self.directory, on_bad=bad)))
        self.reloads += 1
        after = {name: role for name, role in self.keys.values()}
        self._log("client keys reloaded", enrolled=len(self.keys),
                  removed=",".join(sorted(p for p in before if p not in after)) or "-",
                  added=",".join(sorted(p for p in after if p not in before)) or "-",
                  changed=",".join(sorted(p for p in after if p in before
                                          and before[p] != after[p])) or "-")

    def _log(self, event: str, level: str | None = None, **fields) -> None:
        if self.log is not None:
            self.log(event, level=level, **fields)


class Gate:
    """Which requests a connection's principal may make (the table in the module doc), by the
    enrolment as it is when the request comes."""

    def __init__(self, enrolment: Enrolment | None, local: dict[int, str] | None = None):
        self.enrolment = enrolment  # None: TCP clients are not checked (no enrolment)
        self.local = local or {}  # localClientRoles: uid -> role
        self.local_open = local is None  # no localClientRoles: a local uid is not checked

    @property
    def roles(self) -> dict[str, str]:
        """Enrolled key -> role, as the directory holds it now."""
        return {} if self.enrolment is None else self.enrolment.refresh()[1]

    def role(self, principal) -> str | None:
        """The role of ``principal`` (an enrolled key, or uid:N), None when it has none."""
        if isinstance(principal, str) and principal.startswith(LOCAL_PREFIX):
            return self.local.get(int(principal[len(LOCAL_PREFIX):]))
        return None if self.enrolment is None else self.enrolment.refresh()[1].get(principal)

    def refusal(self, frame, op: int, flags: int) -> str | None:
        """Why the request whose header ``frame`` (a zmq.Frame) carries may not go; None: it may."""
        try:
            principal = frame.get("User-Id")  # the connection's key (z85), or uid:N when local
        except zmq.ZMQError:
            principal = ""  # no ZAP on the connection (a benchmark's clear-text TCP)
        if principal.startswith(LOCAL_PREFIX):
            role, keys = self.local.get(int(principal[len(LOCAL_PREFIX):])), {}
            if role is None:
                return None if self.local_open else f"{principal} has no role (localClientRoles)"
        elif self.enrolment is None:
            return None  # over TCP without enrolment: any key may do anything
        else:
            keys, roles = self.enrolment.refresh()
            role = roles.get(principal)
        if role is None:
            return f"key {principal[:8]}... is not enrolled"
        if role == "reader" and (op not in READER_OPS or flags & Bits.FENCE):
            return f"role reader of {self._name(keys, principal)!r} may not {Op(op).name}" + \
                (" with FENCE" if flags & Bits.FENCE else "")
        if flags & Bits.RECOVERY_CREDENTIAL and role != "admin":
            return f"role {role} of {self._name(keys, principal)!r} may not use the recovery credential"
        return None

    @staticmethod
    def _name(keys: dict, principal: str) -> str:
        who = keys.get(principal.encode("ascii"))
        return who[0] if who else principal


class ZapHandler(threading.Thread):
    """Answers ZeroMQ's authentication requests for one worker's context (RFC 27, ZAP)."""

    def __init__(self, zctx: zmq.Context, enrolment: Enrolment | None, log,
                 local: dict[int, str] | None = None):
        super().__init__(name="zap", daemon=True)
        self.enrolment = enrolment  # None: any CURVE key is admitted (the handler runs for
        self.local = local  # the local sockets); uid -> role, None: every local uid admitted
        self.log = log
        self.denied_total = 0
        self._stopping = False
        self.sock = zctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(ZAP_ENDPOINT)  # before any client socket binds: none is ever unguarded
        self.start()

    def run(self) -> None:
        while not self._stopping:
            if not self.sock.poll(200):
                continue
            frames = self.sock.recv_multipart()
            if len(frames) < 6:
                continue  # not a ZAP request; REP needs an answer regardless
            version, request_id, domain, address, _identity, mechanism = frames[:6]
            principal, why = b"", "client key not enrolled; connection refused"
            if mechanism == b"NULL" and domain == LOCAL_DOMAIN:
                principal, why = self.local_principal(address)
            elif mechanism == b"CURVE" and len(frames) == 7 and self.enrolment is None:
                self.sock.send_multipart([version, request_id, b"200", b"OK", b"", b""])
                continue  # no enrolment: any key (the peer's address is the principal)
            elif mechanism == b"CURVE" and len(frames) == 7 and domain == ZAP_DOMAIN:
                public = zmq.utils.z85.encode(frames[6])
                if public in self.enrolment.refresh()[0]:
                    principal = public  # the key is the principal, whatever its file's name
            if principal:
                self.sock.send_multipart([version, request_id, b"200", b"OK", principal, b""])
            else:
                self.denied_total += 1
                if self.denied_total <= 10 or self.denied_total % 1000 == 0:
                    self.log(why, level="warning", address=address.decode(errors="replace"),
                             denied_total=self.denied_total)
                self.sock.send_multipart([version, request_id, b"400", b"not enrolled", b"", b""])

    def local_principal(self, address: bytes) -> tuple[bytes, str]:
        """(uid:N, "") for a local peer whose ``address`` (libzmq: ``host:uid:gid:pid``, from
        SO_PEERCRED) names a uid that may connect, else (b"", why it may not)."""
        try:
            uid = int(address.split(b":")[-3])
        except (IndexError, ValueError):
            return b"", "local peer without credentials; connection refused"
        if self.local is None and self.enrolment is None:
            return f"{LOCAL_PREFIX}{uid}".encode(), ""  # as a TCP client without a key
        if uid not in (self.local or {}):
            return b"", f"local uid {uid} has no role (localClientRoles); connection refused"
        return f"{LOCAL_PREFIX}{uid}".encode(), ""

    def stop(self) -> None:
        self._stopping = True
        self.join(2)
        self.sock.close()


class ServerCurve:
    """A worker's CURVE setup: start with ``start(zctx)`` before binding, ``secure(sock)`` each
    client socket, ``stop()`` before the context ends.

    ``enrolled``: client keys are enrolled (``curveClientKeysDirectory``): then ``gate`` checks
    each request's role and the key is the principal; else ``gate`` is None and the principal
    is the peer's address (``principal_of(curve.enrolled)``, bookie.core.shares)."""

    def __init__(self, conf):
        try:
            self.public, self.secret = server_key.load(server_key.key_path(conf))
        except server_key.ServerKeyError as e:
            raise AuthError(str(e)) from None
        self.enrolment: Enrolment | None = None
        self.gate: Gate | None = None
        self.local_dir = conf.local_socket_dir if conf.local_socket_dir != local_sockets.OFF \
            else ""  # the supervisor writes the directory it prepared, or none
        self.local_roles = local_sockets.parse_roles(conf.local_client_roles) \
            if conf.local_client_roles else None
        if conf.curve_client_keys_dir:
            # the bookie's own key is admin here (its autorecovery); no NAME.key holds a "/"
            self.enrolment = Enrolment(conf.curve_client_keys_dir,
                                       always={self.public: ("bookie/self", "admin")})
        if self.enrolment is not None or (self.local_dir and self.local_roles is not None):
            self.gate = Gate(self.enrolment, self.local_roles)
        self.handler: ZapHandler | None = None

    @property
    def enrolled(self) -> bool:
        return self.enrolment is not None

    def start(self, zctx, log) -> None:
        if self.enrolment is not None:
            self.enrolment.log = log
        if self.enrolment is not None or self.local_dir:
            self.handler = ZapHandler(zctx, self.enrolment, log, self.local_roles)

    def secure(self, sock) -> None:
        if plaintext_for_bench():
            return  # a benchmark's baseline only (PLAINTEXT_ENV): the registration names no key
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        if self.enrolment is not None:  # no handler, no domain: any client key is admitted
            sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)

    def bind_local(self, sock, kind: str, port: int) -> str | None:
        """Bind ``sock`` (already bound to its TCP port, with CURVE) also to its local socket
        (``kind``: "add" or "read") when the bookie has them: the NULL mechanism there, the
        ZAP handler naming the peer's uid.  libzmq copies a socket's options into each
        endpoint at its bind, so the TCP endpoint keeps CURVE.  Returns the path, or None."""
        if not self.local_dir:
            return None
        path = local_sockets.socket_paths(self.local_dir, port)[0 if kind == "add" else 1]
        sock.setsockopt(zmq.CURVE_SERVER, 0)
        sock.setsockopt(zmq.ZAP_DOMAIN, LOCAL_DOMAIN)
        sock.bind(local_sockets.endpoint(path))  # libzmq unlinks a stale file of ours first
        local_sockets.open_to_all(path)
        return path

    def stop(self) -> None:
        if self.handler is not None:
            self.handler.stop()


PLAINTEXT_ENV = "BOOKIE_BENCH_PLAINTEXT"


def plaintext_for_bench() -> bool:
    """Whether this bookie serves its client sockets in the clear, for one purpose only: the
    baseline of CURVE's cost (``python -m bookie.bench.curve_cost``).  Set by that benchmark in
    its bookies' environment as ``BOOKIE_BENCH_PLAINTEXT=1``; never by the package, the unit or
    a configuration key.  Its registration then publishes no key (clients connect in the clear,
    as to a bookie from before keys), the supervisor warns at start, and ``startchecks`` refuses
    it on anything but loopback."""
    return os.environ.get(PLAINTEXT_ENV) == "1"


def server_curve(conf) -> ServerCurve:
    """The worker's CURVE setup (always: the bookie proves its key on every connection)."""
    return ServerCurve(conf)
