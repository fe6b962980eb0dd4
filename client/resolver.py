"""Where a bookie is now: the one place where a bookie id (an ensemble member) becomes an address.

Theory of operation.  Ensembles name bookies by id (``bookie.metadata.bookie_ids``):

* an address id ``host:port`` resolves to itself, with no lookup (a bookie without
  ``bookieId``; nothing changed for it);
* a named id (``bk-1``) resolves through the bookie's registration in the metadata store:
  the ``host`` and ``add_port`` it published when it registered (``bookie run`` writes them).

Every piece that connects to bookies (the client's I/O thread, autorecovery's copier, the
shell's recovery commands) calls ``bookie.client.connection.connect`` with a resolver, and
``connect`` asks it for the address; nothing else turns an id into an address.

Caching.  A named id's address is read once, on the caller's thread (the client's I/O loop
waits for the store once per id and client), and kept.  It is read again

* after a connection to it failed (the caller says so with ``forget``: a request timed out,
  so the bookie may have moved; read on a thread of its own, so an I/O loop never waits for
  the store), and
* when its registration changes: a watch on its registration node (writable and read-only)
  takes the new address, and calls each ``on_moved`` listener when it differs, so that sockets
  to the old address are dropped at once instead of after a timeout.  (Watches may coalesce
  quick changes; a change they miss costs one request's timeout, then ``forget`` re-reads.)

An id that is registered nowhere keeps its last known address (a bookie that restarts is
unregistered for a moment; its connections must not be torn down for that).  An id never seen
registered raises ``UnresolvedBookieError``: the caller treats it as an unreachable bookie.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import orjson

from bookie.metadata.bookie_ids import split_address

log = logging.getLogger("bookie.client")


class UnresolvedBookieError(ValueError):
    """A bookie id that names no address: not ``host:port`` and not registered (a ValueError,
    as ``parse_bookie``'s complaint about an address was)."""


def address_of(info: dict | None) -> tuple[str, int] | None:
    """``(host, add_port)`` from a registration's info dict, or None when it has none."""
    if not isinstance(info, dict):
        return None
    host, port = info.get("host"), info.get("add_port")
    if not isinstance(host, str) or not host or not isinstance(port, int) \
            or isinstance(port, bool) or not 0 < port < 65535:
        return None
    return host, port


class BookieResolver:
    """Bookie id -> ``(host, add_port)``.  Thread-safe; cheap for address ids.

    Args:
        store: the ``MetadataStore`` whose registrations name the bookies' addresses, or None
            (then only address ids resolve).
    """

    def __init__(self, store=None):
        self._store = store
        self._known: dict[str, tuple[str, int]] = {}  # named id -> last address seen
        self._refreshing: set[str] = set()  # named ids being read again after a failure
        self._lock = threading.Lock()
        self._cancels: dict[str, list[Callable[[], None]]] = {}  # named id -> its watches
        self._closed = False
        self.on_moved: list[Callable[[str], None]] = []  # called with an id whose address changed

    def address(self, bookie_id: str) -> tuple[str, int]:
        """Where ``bookie_id``'s add socket is (its read socket is port + 1).

        Raises:
            UnresolvedBookieError: a named id with no store to look in, or registered nowhere
                (never seen), or the store did not answer.
        """
        known = self._known.get(bookie_id)
        if known is not None:
            return known
        address = split_address(bookie_id)
        if address is not None:
            return address
        if self._store is None:
            raise UnresolvedBookieError(f"bookie {bookie_id!r} is not host:port, and there is no "
                                        f"metadata store to find its address in")
        found = self._read(bookie_id)
        if found is None:
            raise UnresolvedBookieError(f"bookie {bookie_id} is not registered (not running?): "
                                        f"its address is unknown")
        with self._lock:
            self._known[bookie_id] = found
        self._watch(bookie_id)
        return found

    def forget(self, bookie_id: str) -> None:
        """A connection to ``bookie_id`` failed: read its registration again, on a thread of
        its own (never waits for the store: safe on an I/O loop); a new address is taken and
        reported to ``on_moved``.  Its last known address stays the answer meanwhile, and
        while it is registered nowhere."""
        with self._lock:
            if bookie_id not in self._known or bookie_id in self._refreshing:
                return
            self._refreshing.add(bookie_id)
        threading.Thread(target=self._refresh, args=(bookie_id,), daemon=True,
                         name="bookie-resolver").start()

    def close(self) -> None:
        """Cancel the watches (idempotent); what is known still resolves."""
        with self._lock:
            self._closed = True
            cancels, self._cancels = self._cancels, {}
        for each in cancels.values():
            for cancel in each:
                cancel()

    # -- inside ------------------------------------------------------------------------------

    def _refresh(self, bookie_id: str) -> None:
        try:
            found = self._read(bookie_id)
        except Exception as e:  # noqa: BLE001 - a store closed meanwhile: keep the last address
            log.debug("re-reading the registration of %s: %s", bookie_id, e)
            found = None
        finally:
            with self._lock:
                self._refreshing.discard(bookie_id)
        if found is not None:
            self._update(bookie_id, found)

    def _read(self, bookie_id: str) -> tuple[str, int] | None:
        from bookie.metadata import MetadataError
        try:
            return address_of(self._store.bookie_info(bookie_id))
        except (MetadataError, ValueError) as e:
            raise UnresolvedBookieError(f"looking up bookie {bookie_id}: {e}") from None

    def _update(self, bookie_id: str, found: tuple[str, int]) -> None:
        with self._lock:
            moved = self._known.get(bookie_id) not in (None, found)
            self._known[bookie_id] = found
        if moved:
            log.info("bookie moved", extra={"fields": {"bookie": bookie_id,
                                                       "address": f"{found[0]}:{found[1]}"}})
            for listener in list(self.on_moved):
                listener(bookie_id)

    def _watch(self, bookie_id: str) -> None:
        """Watch ``bookie_id``'s registration, writable and read-only, from the first time it
        is resolved (a cluster of address ids never pays for a watch).  A node watch, not a
        membership watch: a restart on another port that leaves the list of ids as it was is
        still a change of the node's data."""
        from bookie.metadata import MetadataError
        from bookie.metadata.store import AVAILABLE, READONLY, join
        with self._lock:
            if bookie_id in self._cancels or self._closed:
                return
            self._cancels[bookie_id] = []

        def changed(data, _version) -> None:
            if data:
                try:
                    found = address_of(orjson.loads(data))
                except orjson.JSONDecodeError:
                    found = None
                if found is not None:
                    self._update(bookie_id, found)
        cancels = []
        try:
            for parent in (AVAILABLE, READONLY):
                cancels.append(self._store.watch_node(join(parent, bookie_id), changed))
        except MetadataError as e:
            log.debug("watching the registration of %s failed: %s", bookie_id, e)
        with self._lock:
            closed = self._closed
            if not closed:
                self._cancels[bookie_id] = cancels
        if closed:
            for cancel in cancels:
                cancel()


ADDRESSES_ONLY = BookieResolver(None)  # resolves address ids only
