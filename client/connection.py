"""One connection to a bookie: a ZeroMQ DEALER to one of its two client sockets.

A bookie serves adds (and WRITE_LAC, INFO) on its port and reads (READ, READ_LAC, fences) on
port + 1 (``bookie.wire``).  Every piece that talks to bookies opens its sockets here: the
client's I/O thread, autorecovery's copier, ``bookie.testing.rawclient`` and the benchmarks, so
that the options a bookie connection needs (no linger, CURVE by the bookie's key, the queue
bounds) are set once, and a bookie id becomes an address and a pinned key in one place
(``bookie.client.resolver``).

Every connection is a CURVE client pinning the key the bookie's registration publishes
(``bookie.client.auth``): a server that cannot prove it fails the handshake, and ZeroMQ never
sends it a request; to the caller it is a bookie that does not answer (down).  ``Proof``
watches a connection's handshakes so the caller can say so at once: once, at warning level,
per id and address (``proof_failed``), and drop the socket rather than wait out a timeout.
"""

from __future__ import annotations

import logging
import threading

import zmq

from bookie.client import local_sockets
from bookie.client.auth import ClientCurve
from bookie.client.resolver import ADDRESSES_ONLY, BookieResolver, UnresolvedBookieError
from bookie.metadata.bookie_ids import split_address

log = logging.getLogger("bookie.client")

# What a server that cannot prove the pinned key causes: it cannot open the client's HELLO
# (no detail), or it speaks another mechanism (protocol).  A bookie that denies the client's
# own key (``curveClientKeysDirectory``: AUTH) did prove its key: not a failed proof.
HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
_warned: set[tuple[str, str]] = set()  # (id, address) said once already
_warned_lock = threading.Lock()
_ephemeral: ClientCurve | None = None

ADD, READ = 0, 1  # port offsets of the bookie's add and read sockets


def parse_bookie(bookie: str) -> tuple[str, int]:
    """(host, port) of a bookie address ``host:port``; ValueError when it is not one."""
    address = split_address(bookie)
    if address is None:
        raise ValueError(f"bookie address {bookie!r} is not host:port")
    return address


def connect(ctx: zmq.Context, bookie: str, kind: int = ADD, curve=None, unbounded: bool = False,
            keepalive: bool = False, resolver: BookieResolver | None = None,
            local: bool | None = None) -> zmq.Socket:
    """A DEALER connected to ``bookie``'s add (``ADD``) or read (``READ``) socket.

    Args:
        bookie: the bookie's id, as ensembles name it (``host:port``, or a ``bookieId``).
        curve: the client's keys (``bookie.client.auth.ClientCurve``); None: an ephemeral
            keypair of this process.  The server key pinned: ``curveServerKeys``'s for the
            bookie, else the one the resolver finds (client/auth.py).
        unbounded: no ZeroMQ high-water marks (the caller bounds what it has in flight).
        keepalive: TCP keepalive (long-lived connections of the client's I/O thread).
        resolver: where ids are looked up (``bookie.client.resolver``); None: address ids
            only, with no key published (``curve`` must pin one: ``curveServerKeys``).
        local: use the bookie's local socket where its registration publishes one that
            passes the checks of ``bookie.client.local_sockets`` (then no TCP connection is
            made, and no CURVE: the kernel vouches for both ends); None: as ``curve`` says
            (``useLocalSockets``, default true).
    Raises:
        UnresolvedBookieError (a ValueError): ``bookie`` is not registered (down), or no
            address is known for it, or its registration publishes no key and the client
            does not allow clear text (``allowClearTextBookies``).
    """
    return connect_proved(ctx, bookie, kind, curve, unbounded, keepalive, resolver,
                          watch=False, local=local)[0]


def connect_proved(ctx: zmq.Context, bookie: str, kind: int = ADD, curve=None,
                   unbounded: bool = False, keepalive: bool = False,
                   resolver: BookieResolver | None = None, watch: bool = True,
                   local: bool | None = None):
    """``connect``, and a ``Proof`` watching the connection's handshakes (None without
    ``watch``, or over a local socket: no key to prove there).  Returns ``(socket, proof)``."""
    target = (resolver or ADDRESSES_ONLY).resolve(bookie)
    host, port = target.host, target.port
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if unbounded:
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    curve = curve or _ephemeral_curve()
    # The local socket is trusted as far as the registration naming it is, as its key is: not
    # where the operator pinned the key (only TCP proves it), nor where the registration
    # publishes no key and clear text is not allowed (client/local_sockets.py)
    allowed = (curve.use_local if local is None else local) and \
        curve.server_key(bookie) is None and bool(target.key or curve.allow_clear)
    path = local_sockets.choose(target.local, bookie, kind, allowed)
    if path is not None:  # the kernel vouches: only the bookie's user can listen there
        sock.connect(f"ipc://{path}")
        return sock, None
    if keepalive:
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    if not curve.apply(sock, bookie, target.key):
        if target.key is None:  # an address given by hand, no store asked: the caller's choice
            log.debug("no key known for bookie %s (no metadata store): spoken to in the clear",
                      bookie)
        elif not curve.allow_clear:  # a registration anyone may have written (client/auth.py)
            sock.close(0)
            _say_once(bookie, f"{host}:{port}", "the bookie's registration publishes no CURVE "
                      "key: refused, treated as down (pin its key with curveServerKeys, or set "
                      "allowClearTextBookies=true to speak to it in the clear)", logging.WARNING)
            raise UnresolvedBookieError(
                f"bookie {bookie}'s registration publishes no CURVE key: refused (pin its key "
                f"with curveServerKeys, or set the client's allowClearTextBookies=true)")
        else:
            _say_once(bookie, f"{host}:{port}", "the bookie's registration publishes no key: "
                      "spoken to in the clear (allowClearTextBookies)", logging.INFO)
    proof = Proof(sock, bookie, f"{host}:{port + kind}") if watch else None
    sock.connect(f"tcp://{host}:{port + kind}")
    return sock, proof


class Proof:
    """The handshakes of one connection: did the server prove the pinned key?"""

    __slots__ = ("monitor", "bookie", "address")

    def __init__(self, sock: zmq.Socket, bookie: str, address: str):
        self.monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)
        self.bookie = bookie
        self.address = address

    def failed(self) -> bool:
        """True if a handshake failed since the last look (says so once per id and address);
        never waits."""
        failed = False
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError:
                break
            if frames:
                failed = True
        if failed:
            proof_failed(self.bookie, self.address)
        return failed

    def close(self) -> None:
        self.monitor.close(0)


def proof_failed(bookie: str, address: str) -> None:
    """Say once, at warning level, that what answers at ``address`` did not prove ``bookie``'s
    key: it is treated as ``bookie`` being down."""
    _say_once(bookie, address, "server failed the proof of the bookie's key; treated as down",
              logging.WARNING)


def _say_once(bookie: str, address: str, message: str, level: int) -> None:
    with _warned_lock:
        if (bookie, address) in _warned:
            return
        _warned.add((bookie, address))
    log.log(level, message, extra={"fields": {"bookie": bookie, "address": address}})


def _ephemeral_curve() -> ClientCurve:
    """A keypair of this process for connections made without one (never an identity)."""
    global _ephemeral
    if _ephemeral is None:
        _ephemeral = ClientCurve()
    return _ephemeral
