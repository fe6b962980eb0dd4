"""CurveZMQ on the client sockets: the bookie's keypair, the enrolled client keys, their roles.

Theory of operation
-------------------
With ``curveSecretKeyFile`` set, both client sockets (add, read) are CURVE servers: every
connection is encrypted and the client proves it holds the secret half of a public key.  Which
keys may connect is decided by a ZAP handler, a thread of the worker bound to ZeroMQ's
``inproc://zeromq.zap.01`` in the worker's context: ZeroMQ asks it once per connection, during the
handshake.  A key not enrolled is denied there, the handshake fails, and the connection never
carries a request: an unknown key gets no answer at all.

Enrolment is a directory, ``curveClientKeysDirectory``, with one subdirectory per role; each holds
public key files as ``bookie shell genkey`` writes them (``NAME.key``).  NAME is the principal.
The handler answers ZeroMQ with the principal as the connection's User-Id; every message from that
connection carries it, and ``Gate.refusal`` maps it to its role for each request:

    reader   READ, READ_LAC (long polls too), INFO
    writer   the reader's, plus ADD (recovery adds too), WRITE_LAC, and the FENCE flag
    admin    everything a writer may, plus the RECOVERY_CREDENTIAL flag (autorecovery's
             recovery adds and fences on the cluster recovery credential)

The bookie's own public key counts as admin here even when not enrolled (its autorecovery
worker connects with it); enrol each bookie's key as admin at the others.  Deleting ledgers
and formatting do not pass these sockets (metadata store, local shell).  A request its role does not allow is
answered UNAUTHORIZED and does nothing.  The directory is read when a worker starts.
"""

from __future__ import annotations

import os
import threading

import zmq
import zmq.auth
import zmq.utils.z85

from bookie.wire import Flag, Op

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"bookie"
ROLES = ("reader", "writer", "admin")
READER_OPS = frozenset((Op.READ, Op.READ_LAC, Op.INFO))


class AuthError(ValueError):
    """A key file or enrolment directory that cannot be used; one line naming it."""


def load_secret(path: str) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a secret key file."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise AuthError(f"curve key file {path}: {e}") from None
    if not secret:
        raise AuthError(f"curve key file {path} holds no secret key (use NAME.key_secret)")
    return public, secret


def load_enrolment(directory: str) -> dict[bytes, tuple[str, str]]:
    """Public key (z85) -> (principal, role), from ``directory/ROLE/NAME.key``."""
    if not os.path.isdir(directory):
        raise AuthError(f"curveClientKeysDirectory={directory} is not a directory")
    keys: dict[bytes, tuple[str, str]] = {}
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
                raise AuthError(f"enrolled key {os.path.join(sub, name)}: {e}") from None
            keys[public] = (name[:-len(".key")], role)
    return keys


class Gate:
    """Which requests a connection's principal may make (the table in the module doc)."""

    def __init__(self, enrolled: dict[bytes, tuple[str, str]]):
        self.roles = {principal: role for principal, role in enrolled.values()}

    def refusal(self, frame, op: int, flags: int) -> str | None:
        """Why the request whose header ``frame`` (a zmq.Frame) carries may not go; None: it may."""
        principal = frame.get("User-Id")
        role = self.roles.get(principal)
        if role is None:
            return f"principal {principal!r} is not enrolled"
        if role == "reader" and (op not in READER_OPS or flags & Flag.FENCE):
            return f"role reader of {principal!r} may not {Op(op).name}" + \
                (" with FENCE" if flags & Flag.FENCE else "")
        if flags & Flag.RECOVERY_CREDENTIAL and role != "admin":
            return f"role {role} of {principal!r} may not use the recovery credential"
        return None


class ZapHandler(threading.Thread):
    """Answers ZeroMQ's authentication requests for one worker's context (RFC 27, ZAP)."""

    def __init__(self, zctx: zmq.Context, enrolled: dict[bytes, tuple[str, str]], log):
        super().__init__(name="zap", daemon=True)
        self.enrolled = enrolled
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
            principal = b""
            if mechanism == b"CURVE" and len(frames) == 7 and domain == ZAP_DOMAIN:
                who = self.enrolled.get(zmq.utils.z85.encode(frames[6]))
                if who is not None:
                    principal = who[0].encode()
            if principal:
                self.sock.send_multipart([version, request_id, b"200", b"OK", principal, b""])
            else:
                self.denied_total += 1
                if self.denied_total <= 10 or self.denied_total % 1000 == 0:
                    self.log("client key not enrolled; connection refused", level="warning",
                             address=address.decode(errors="replace"),
                             denied_total=self.denied_total)
                self.sock.send_multipart([version, request_id, b"400", b"not enrolled", b"", b""])

    def stop(self) -> None:
        self._stopping = True
        self.join(2)
        self.sock.close()


class ServerCurve:
    """A worker's CURVE setup: start with ``start(zctx)`` before binding, ``secure(sock)`` each
    client socket, ``stop()`` before the context ends."""

    def __init__(self, conf):
        self.public, self.secret = load_secret(conf.curve_secret_key_file)
        self.enrolled = load_enrolment(conf.curve_client_keys_dir)
        # the bookie's own key is admin here (its autorecovery); no NAME.key holds a "/"
        self.enrolled.setdefault(self.public, ("bookie/self", "admin"))
        self.gate = Gate(self.enrolled)
        self.handler: ZapHandler | None = None

    def start(self, zctx, log) -> None:
        self.handler = ZapHandler(zctx, self.enrolled, log)

    def secure(self, sock) -> None:
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)

    def stop(self) -> None:
        if self.handler is not None:
            self.handler.stop()


def server_curve(conf) -> ServerCurve | None:
    """The worker's CURVE setup, or None when the bookie runs without (loopback only)."""
    return ServerCurve(conf) if conf.curve_secret_key_file else None
