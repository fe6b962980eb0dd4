"""Where a bookie is now: the one place where a bookie id (an ensemble member) becomes an address.

Theory of operation.  Ensembles name bookies by id (``bookie.metadata.bookie_ids``):

* an address id ``host:port`` resolves to itself, with no lookup (a bookie without
  ``bookieId``; nothing changed for it);
* a named id (``bk-1``) resolves through the bookie's registration in the metadata store:
  the ``host`` and ``add_port`` it published when it registered (``bookie run`` writes them).

Every piece that connects to bookies (the client's I/O thread, autorecovery's copier, the
shell's recovery commands) calls ``bookie.client.connection.connect`` with a resolver, and
``connect`` asks it for the address; nothing else turns an id into an address.

Caching.  A named id's address is read once and kept.  It is read again

* after a connection to it failed (the caller says so with ``forget``: a request timed out,
  so the bookie may have moved), and
* when the registrations change: a watch on the bookies' membership re-reads every named id
  this resolver knows, and calls each ``on_moved`` listener for an id whose address changed,
  so that sockets to the old address are dropped at once instead of after a timeout.  (A
  restart that leaves the membership list the same between two deliveries is not seen by the
  watch; the first request to the old address then times out, and ``forget`` re-reads it.)

An id that is registered nowhere keeps its last known address (a bookie that restarts is
unregistered for a moment; its connections must not be torn down for that).  An id never seen
registered raises ``UnresolvedBookieError``: the caller treats it as an unreachable bookie.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

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
        self._stale: set[str] = set()  # named ids to read again at their next ``address``
        self._lock = threading.Lock()
        self._cancel_watch: Callable[[], None] | None = None
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
            if bookie_id not in self._stale:
                return known
            self._stale.discard(bookie_id)
            try:
                found = self._read(bookie_id)
            except UnresolvedBookieError:
                return known
            if found is None:
                return known  # registered nowhere now: the last address is the best answer
            self._update(bookie_id, found)
            return found
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
        self._watch()
        return found

    def forget(self, bookie_id: str) -> None:
        """A connection to ``bookie_id`` failed: read its registration again at the next
        ``address`` call (its last known address stays the answer while it is registered
        nowhere).  Never waits for the store: safe on an I/O loop."""
        if bookie_id in self._known:
            self._stale.add(bookie_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            cancel, self._cancel_watch = self._cancel_watch, None
        if cancel is not None:
            cancel()

    # -- inside ------------------------------------------------------------------------------

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

    def _watch(self) -> None:
        """Watch the membership from the first named id on (a cluster of address ids never
        pays for a watch)."""
        with self._lock:
            if self._cancel_watch is not None or self._closed:
                return
            self._cancel_watch = lambda: None  # taken: one watch per resolver
        from bookie.metadata import MetadataError
        try:
            cancel = self._store.watch_bookies(self._membership_changed)
        except MetadataError as e:
            log.debug("watching bookie registrations failed: %s", e)
            with self._lock:
                self._cancel_watch = None  # try again at the next named id
            return
        with self._lock:
            closed = self._closed
            if not closed:
                self._cancel_watch = cancel
        if closed:
            cancel()

    def _membership_changed(self, writable, readonly) -> None:
        registered = set(writable) | set(readonly)
        for bookie_id in list(self._known):
            if bookie_id not in registered:
                continue  # gone for now: its last address stays the best answer
            try:
                found = self._read(bookie_id)
            except UnresolvedBookieError as e:
                log.debug("%s", e)
                continue
            if found is not None:
                self._update(bookie_id, found)


ADDRESSES_ONLY = BookieResolver(None)  # resolves address ids only
