"""Plain TCP sockets in tests: has the bookie shut this connection down?"""

import socket


def at_eof(s: socket.socket) -> bool:
    """True once the peer closed the connection (what it sent before is discarded)."""
    s.setblocking(False)
    try:
        while True:
            if s.recv(4096) == b"":
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
