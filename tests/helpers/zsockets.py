"""Raw ZeroMQ sockets of the tests: a DEALER on a bookie's add or read socket that buffers
without limit, with a monitor that sees the bookie shut it down; a long poll; ``pin``, which
makes any raw DEALER a CURVE client of a bookie pinning the key its registration publishes
(every bookie serves CURVE: a socket in the clear gets no answer)."""

import zmq

from bookie import wire
from bookie.client.auth import ClientCurve
from bookie.testing.rawclient import known_resolver
from bookie.wire import Flag, Op


def pin(sock, bookie: str, curve=None) -> tuple[str, int]:
    """Make ``sock`` (not yet connected) a CURVE client of ``bookie`` (an id of a running
    ``LocalBookies`` of this process), pinning the key its registration publishes (its cookie's
    for a bookie without a store); ``curve``: the client's keys (default: ephemeral).  Returns
    the bookie's ``(host, add_port)``."""
    resolver = known_resolver(bookie)
    if resolver is None:
        raise LookupError(f"bookie {bookie} is registered in no store of this process's "
                          f"LocalBookies: its key is unknown")
    target = resolver.resolve(bookie)
    (curve or ClientCurve()).apply(sock, bookie, target.key)
    return target.host, target.port


def raw_dealer(ctx, bookie: str, port_offset: int, curve=None, source: str | None = None,
               reconnect: bool = True):
    """A DEALER on ``bookie``'s add (``port_offset`` 0) or read (1) socket, and a monitor of its
    disconnections; ``curve`` (client/auth.py ClientCurve) secures it first; ``source``: the
    local address to connect from (another host, as far as the bookie can tell).  Without
    ``reconnect``, a connection the bookie shuts stays shut: a DEALER otherwise connects again
    and sends what it still had queued over the new connection, a new client to the bookie."""
    s = ctx.socket(zmq.DEALER)
    if not reconnect:
        s.setsockopt(zmq.RECONNECT_IVL, -1)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    host, port = pin(s, bookie, curve)
    monitor = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    via = f"{source}:0;" if source else ""
    s.connect(f"tcp://{via}{host}:{int(port) + port_offset}")
    return s, monitor


def long_poll(rid: int, ledger: int) -> list:
    """A READ_LAC long poll for a LAC past 5, waiting up to a minute."""
    return [wire.pack_header(Op.READ_LAC, int(Flag.LONG_POLL), rid, ledger),
            wire.LONG_POLL_BODY.pack(5, 60_000)]


def zmtp_partial_sender(host: str, port: int, source: str | None = None):
    """A raw TCP client speaking ZMTP 3.0 (NULL, as a DEALER) to a bookie's socket: a ZeroMQ
    socket sends nothing of a message before its last frame, this one sends frames of a
    message that never ends.  Returns ``(sock, send_frame)``; ``send_frame(data)`` sends one
    frame flagged MORE.  It speaks NULL: every bookie serves CURVE since issue 30, so a bookie
    now ends it at the greeting (the tests that used it against a bookie are skipped until a
    CURVE-speaking sender exists)."""
    import socket
    import struct

    s = socket.create_connection((host, port), timeout=10,
                                 source_address=(source, 0) if source else None)
    greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
    s.sendall(greeting)
    got = b""
    while len(got) < 64:
        chunk = s.recv(64 - len(got))
        if not chunk:
            raise ConnectionError("closed during the greeting")
        got += chunk
    body = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    s.sendall(b"\x04" + bytes([len(body)]) + body)

    def send_frame(data: bytes) -> None:
        s.sendall(b"\x03" + struct.pack(">Q", len(data)) + data)  # MORE | LONG
    return s, send_frame
