"""One ``BookKeeper`` client per Python worker process and connection.

Spark pickles readers and writers to its Python workers with every task, so neither may hold a
client (an I/O thread and sockets do not pickle, nor survive a fork).  Instead each process
opens a client the first time a task asks for one, keeps it for the tasks that follow (Spark
reuses its Python workers), and closes it when the process exits.
"""

from __future__ import annotations

import atexit
import os
import threading

from bookie.client import BookKeeper
from bookie.spark.options import Connection

_lock = threading.Lock()
_clients: dict[tuple, BookKeeper] = {}
_pid: int | None = None


def client_for(conn: Connection) -> BookKeeper:
    """This process's client for ``conn``'s metadata URI and client keys (opened on first
    use; a fork gets its own)."""
    global _pid
    key = (conn.metadata_uri, conn.config)
    with _lock:
        if _pid != os.getpid():  # forked from a process that had clients: never reuse them
            _clients.clear()
            _pid = os.getpid()
        bk = _clients.get(key)
        if bk is None:
            bk = _clients[key] = BookKeeper(conn.metadata_uri, dict(conn.config))
        return bk


@atexit.register
def _close_all() -> None:
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for bk in clients:
        try:
            bk.close()
        except Exception:  # noqa: BLE001 - process exit: nothing left to tell
            pass
