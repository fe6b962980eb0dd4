"""Raw ZeroMQ sockets of the tests: a DEALER on a bookie's add or read socket that buffers
without limit, with a monitor that sees the bookie shut it down; a long poll; ``pin``, which
makes any raw DEALER a CURVE client of a bookie pinning the key its registration publishes
(every bookie serves CURVE: a socket in the clear gets no answer); ``zmtp_partial_sender``, a
raw CurveZMQ client that sends frames of a message that never ends."""

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


class HandshakeError(ConnectionError):
    """The bookie ended a raw sender's connection, or answered it with an ERROR, before the
    CURVE handshake finished (a wrong server key; a peer the bookie shuts out on sight)."""


def bookie_key(host: str, port: int) -> bytes:
    """The public key (32 bytes) a ``LocalBookies`` bookie of this process publishes in its
    registration, for its add (``port``) or read (``port`` - 1 is its add port) socket."""
    from zmq.utils import z85

    for bookie in (f"{host}:{port}", f"{host}:{port - 1}"):
        resolver = known_resolver(bookie)
        if resolver is not None:
            key = resolver.resolve(bookie).key
            if key:
                return z85.decode(key)
    raise LookupError(f"no LocalBookies bookie of this process at {host}:{port}: its key is "
                      f"unknown (pass server_key)")


def zmtp_partial_sender(host: str, port: int, source: str | None = None,
                        server_key: bytes | None = None):
    """A raw TCP client speaking ZMTP 3.0 with CurveZMQ (RFC 23, RFC 26), as a DEALER with an
    ephemeral client key, to a bookie's socket: a ZeroMQ socket sends nothing of a message
    before its last frame, this one sends frames of a message that never ends.  Returns
    ``(sock, send_frame)``; ``send_frame(data)`` sends one frame flagged MORE (a MESSAGE
    command, the flag inside its box; ``more=False``: the message's last frame).

    ``server_key``: the bookie's public key (32 bytes, or 40 in Z85); None: the key its
    registration publishes (``bookie_key``).  Raises ``HandshakeError`` when the bookie ends
    the connection before READY (a wrong key, say), other OSErrors when it cannot connect."""
    import os
    import socket
    import struct

    from nacl.bindings import crypto_box, crypto_box_afternm, crypto_box_beforenm, \
        crypto_box_open, crypto_box_open_afternm
    from nacl.exceptions import CryptoError
    from nacl.public import PrivateKey
    from zmq.utils import z85

    if server_key is None:
        server_key = bookie_key(host, port)
    elif len(server_key) == 40:
        server_key = z85.decode(server_key)
    permanent = PrivateKey.generate()  # C, c: an ephemeral client key, as ClientCurve makes
    transient = PrivateKey.generate()  # C', c': this connection's
    nonce = [0]

    def short_nonce() -> bytes:
        nonce[0] += 1  # strictly increasing across HELLO, INITIATE and every MESSAGE
        return struct.pack(">Q", nonce[0])

    def frame(flags: int, body: bytes) -> bytes:
        if len(body) > 255:
            return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body  # LONG
        return bytes([flags, len(body)]) + body

    def command(body: bytes) -> bytes:
        return frame(0x04, body)  # COMMAND

    s = socket.create_connection((host, port), timeout=10,
                                 source_address=(source, 0) if source else None)
    try:
        def recv_exactly(n: int) -> bytes:
            got = b""
            while len(got) < n:
                chunk = s.recv(n - len(got))
                if not chunk:
                    raise HandshakeError("the bookie closed the connection during the handshake")
                got += chunk
            return got

        def recv_command() -> bytes:
            flags = recv_exactly(1)[0]
            size = struct.unpack(">Q", recv_exactly(8))[0] if flags & 0x02 else recv_exactly(1)[0]
            body = recv_exactly(size)
            if not flags & 0x04:
                raise HandshakeError(f"a message frame during the handshake: {body[:16]!r}")
            if body.startswith(b"\x05ERROR"):
                raise HandshakeError(f"the bookie refused the handshake: {body[7:]!r}")
            return body

        greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") \
            + b"\0" + b"\0" * 31  # as-server 0
        s.sendall(greeting)
        theirs = recv_exactly(64)
        if theirs[0] != 0xFF or theirs[9] != 0x7F or theirs[12:32].rstrip(b"\0") != b"CURVE":
            raise HandshakeError(f"not a CURVE server's greeting: {theirs!r}")

        # HELLO: C', and a box of 64 zero bytes from C' to S proving we know S
        n = short_nonce()
        hello_box = crypto_box(b"\0" * 64, b"CurveZMQHELLO---" + n, bytes(server_key),
                               bytes(transient))
        s.sendall(command(b"\x05HELLO" + b"\x01\x00" + b"\0" * 72
                          + bytes(transient.public_key) + n + hello_box))

        # WELCOME: a box from S to C' of S' and the cookie (opens only if S is the bookie's key)
        welcome = recv_command()
        if not welcome.startswith(b"\x07WELCOME") or len(welcome) != 168:
            raise HandshakeError(f"no WELCOME: {welcome[:16]!r}")
        try:
            opened = crypto_box_open(welcome[24:], b"WELCOME-" + welcome[8:24],
                                     bytes(server_key), bytes(transient))
        except CryptoError:
            raise HandshakeError("the WELCOME box does not open: not the server key") from None
        server_transient, cookie = opened[:32], opened[32:128]
        session = crypto_box_beforenm(server_transient, bytes(transient))

        # INITIATE: the cookie, and a box from C' to S' of C, the vouch (C' and S boxed from
        # C to S') and the metadata
        vouch_nonce = os.urandom(16)
        vouch = crypto_box(bytes(transient.public_key) + bytes(server_key),
                           b"VOUCH---" + vouch_nonce, server_transient, bytes(permanent))
        name = b"Socket-Type"
        metadata = bytes([len(name)]) + name + struct.pack(">I", 6) + b"DEALER"
        n = short_nonce()
        initiate_box = crypto_box_afternm(bytes(permanent.public_key) + vouch_nonce + vouch
                                          + metadata, b"CurveZMQINITIATE" + n, session)
        s.sendall(command(b"\x08INITIATE" + cookie + n + initiate_box))

        # READY: a box from S' to C' of the bookie's metadata
        ready = recv_command()
        if not ready.startswith(b"\x05READY") or len(ready) < 6 + 8 + 16:
            raise HandshakeError(f"no READY: {ready[:16]!r}")
        try:
            crypto_box_open_afternm(ready[14:], b"CurveZMQREADY---" + ready[6:14], session)
        except CryptoError:
            raise HandshakeError("the READY box does not open") from None
    except HandshakeError:
        s.close()
        raise
    except OSError as e:  # reset, or a timeout: the handshake did not finish either
        s.close()
        raise HandshakeError(f"the handshake failed: {e!r}") from e

    def send_frame(data: bytes, more: bool = True) -> None:
        n = short_nonce()
        flags = b"\x01" if more else b"\x00"  # MORE, inside the box
        box = crypto_box_afternm(flags + data, b"CurveZMQMESSAGEC" + n, session)
        s.sendall(frame(0x00, b"\x07MESSAGE" + n + box))
    return s, send_frame
