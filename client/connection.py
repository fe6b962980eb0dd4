"""One connection to a bookie: a ZeroMQ DEALER to one of its two client sockets.

A bookie serves adds (and WRITE_LAC, INFO) on its port and reads (READ, READ_LAC, fences) on
port + 1 (``bookie.wire``).  Every piece that talks to bookies opens its sockets here: the
client's I/O thread, autorecovery's copier, ``bookie.testing.rawclient`` and the benchmarks, so
that the options a bookie connection needs (no linger, CURVE by the bookie's key, the queue
bounds) are set once, and a bookie id becomes an address in one place (``bookie.client.resolver``).
"""

from __future__ import annotations

import zmq

from bookie.client.resolver import ADDRESSES_ONLY, BookieResolver
from bookie.metadata.bookie_ids import split_address

ADD, READ = 0, 1  # port offsets of the bookie's add and read sockets


def parse_bookie(bookie: str) -> tuple[str, int]:
    """(host, port) of a bookie address ``host:port``; ValueError when it is not one."""
    address = split_address(bookie)
    if address is None:
        raise ValueError(f"bookie address {bookie!r} is not host:port")
    return address


def connect(ctx: zmq.Context, bookie: str, kind: int = ADD, curve=None, unbounded: bool = False,
            keepalive: bool = False, resolver: BookieResolver | None = None) -> zmq.Socket:
    """A DEALER connected to ``bookie``'s add (``ADD``) or read (``READ``) socket.

    Args:
        bookie: the bookie's id, as ensembles name it (``host:port``, or a ``bookieId``).
        curve: a ``bookie.client.auth.ClientCurve`` when the bookie speaks CURVE (its key is
            pinned by id).
        unbounded: no ZeroMQ high-water marks (the caller bounds what it has in flight).
        keepalive: TCP keepalive (long-lived connections of the client's I/O thread).
        resolver: where named ids are looked up (``bookie.client.resolver``); None: address
            ids only.
    Raises:
        UnresolvedBookieError (a ValueError): no address is known for ``bookie``.
    """
    host, port = (resolver or ADDRESSES_ONLY).address(bookie)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if unbounded:
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    if keepalive:
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    if curve is not None:
        curve.apply(sock, bookie)
    sock.connect(f"tcp://{host}:{port + kind}")
    return sock
