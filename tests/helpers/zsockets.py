"""Raw ZeroMQ sockets of the security tests: a DEALER on a bookie's add or read socket that
buffers without limit, with a monitor that sees the bookie shut it down; a long poll."""

import zmq

from bookie import wire
from bookie.wire import Flag, Op


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
    if curve is not None:
        curve.apply(s, bookie)
    monitor = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    host, port = bookie.rsplit(":", 1)
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
    frame flagged MORE."""
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
