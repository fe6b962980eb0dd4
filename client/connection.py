"""One connection to a bookie: a ZeroMQ DEALER to one of its two client sockets.

A bookie serves adds (and WRITE_LAC, INFO) on its port and reads (READ, READ_LAC, fences) on
port + 1 (``bookie.wire``).  Every piece that talks to bookies opens its sockets here: the
client's I/O thread, autorecovery's copier, ``bookie.testing.rawclient`` and the benchmarks, so
that the options a bookie connection needs (no linger, CURVE by the bookie's key, the queue
bounds) are set once.
"""

from __future__ import annotations

import zmq

ADD, READ = 0, 1  # port offsets of the bookie's add and read sockets


def parse_bookie(bookie: str) -> tuple[str, int]:
    """(host, port) of a bookie id ``host:port``; ValueError when it is not one."""
    host, sep, port = bookie.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65535:
        raise ValueError(f"bookie address {bookie!r} is not host:port")
    return host, int(port)


def connect(ctx: zmq.Context, bookie: str, kind: int = ADD, curve=None, unbounded: bool = False,
            keepalive: bool = False) -> zmq.Socket:
    """A DEALER connected to ``bookie``'s add (``ADD``) or read (``READ``) socket.

    Args:
        curve: a ``bookie.client.auth.ClientCurve`` when the bookie speaks CURVE.
        unbounded: no ZeroMQ high-water marks (the caller bounds what it has in flight).
        keepalive: TCP keepalive (long-lived connections of the client's I/O thread).
    """
    host, port = parse_bookie(bookie)
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
