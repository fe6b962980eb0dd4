"""Where a bookie is now, and which key proves it: the one place where a bookie id (an ensemble
member) becomes an address and a pinned server key.

Theory of operation (DESIGN.md, "Identity").  Ensembles name bookies by id
(``bookie.metadata.bookie_ids``), an address id ``host:port`` or a named id (``bk-1``).  With a
metadata store, every id resolves through the bookie's registration: the ``host`` and
``add_port`` it published, and its public CURVE key (``curve_public_key``), which the
connection pins (``bookie.client.connection``).  A bookie registered nowhere is down: its id
resolves to nothing (``UnresolvedBookieError``), whatever address it had before, so an address
is never used once the registration stops naming it.  Without a store (``ADDRESSES_ONLY``) an
address id resolves to itself with no key: the caller must pin one another way
(``curveServerKeys``), or the bookie's handshake fails.

Every piece that connects to bookies (the client's I/O thread, autorecovery's copier, the
shell's recovery commands, the Spark connector through the client, ``bookie.testing``'s raw
client) calls ``bookie.client.connection.connect`` with a resolver, and ``connect`` asks it;
nothing else turns an id into an address or a key.

Caching.  An id's registration is read once, on the caller's thread (the client's I/O loop
waits for the store once per id and client), and kept, a missing one too.  It is read again

* after a connection to it failed (the caller says so with ``forget``: a request timed out or
  the server failed the key's proof; read on a thread of its own, so an I/O loop never waits
  for the store), and
* when its registration changes: a watch on its registration nodes (writable and read-only)
  re-reads it and calls each ``on_moved`` listener when the address or key changed, or the
  registration went, so that sockets to the old address are dropped at once.  (Watches may
  coalesce quick changes; a change they miss costs one request's timeout, then ``forget``
  re-reads.)

Which key is pinned is ``bookie.client.auth``'s rule: an explicit ``curveServerKeys`` entry wins
over the published key; a registration without a key is refused unless the client allows
clear text (``allowClearTextBookies``).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, NamedTuple

import orjson

from bookie.client import local_sockets
from bookie.client.local_sockets import LocalSockets
from bookie.metadata.bookie_ids import split_address
from bookie.metadata import MetadataError
from bookie.metadata.store import AVAILABLE, READONLY, join

log = logging.getLogger("bookie.client")

KEY_FIELD = "curve_public_key"  # the registration's public key (bookie.storage.server_key)


class UnresolvedBookieError(ValueError):
    """A bookie id that names no address: not ``host:port`` and not registered (a ValueError,
    as ``parse_bookie``'s complaint about an address was)."""


class Target(NamedTuple):
    """Where a bookie is (``host``, add ``port``; reads on port + 1) and the public key its
    registration publishes (z85 bytes); ``b""``: a registration from before keys (no key
    published); None: no registration read (an address id without a store)."""

    host: str
    port: int
    key: bytes | None
    local: LocalSockets | None = None  # its local sockets (client/local_sockets.py), if any


def target_of(info: dict | None) -> Target | None:
    """The ``Target`` a registration's info dict names, or None when it names no address."""
    address = address_of(info)
    if address is None:
        return None
    key = info.get(KEY_FIELD)
    key = key.encode("ascii") if isinstance(key, str) and len(key) == 40 and key.isascii() else b""
    return Target(address[0], address[1], key, local_sockets.parse(info))


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
    """Bookie id -> ``Target``.  Thread-safe.

    Args:
        store: the ``MetadataStore`` whose registrations name the bookies, or None (then only
            address ids resolve, with no key but what ``pinned`` gives).
        pinned: without a store, the keys of address ids learnt another way (a bookie run
            without a metadata store: ``bookie.testing`` reads it from the bookie's cookie).
    """

    def __init__(self, store=None, pinned: dict[str, bytes] | None = None):
        self._store = store
        self._pinned = dict(pinned or {})  # without a store: address id -> key known otherwise
        self._known: dict[str, Target | None] = {}  # id -> last registration seen (None: none)
        self._refreshing: set[str] = set()  # ids being read again
        self._lock = threading.Lock()
        self._cancels: dict[str, list[Callable[[], None]]] = {}  # id -> its watches
        self._closed = False
        self.on_moved: list[Callable[[str], None]] = []  # called with an id that moved or went

    def address(self, bookie_id: str) -> tuple[str, int]:
        """Where ``bookie_id``'s add socket is (its read socket is port + 1).  Raises as
        ``resolve``."""
        target = self.resolve(bookie_id)
        return target.host, target.port

    def resolve(self, bookie_id: str, fresh: bool = False) -> Target:
        """Where ``bookie_id`` is and the key it must prove; ``fresh``: read the registration
        now, whatever is known (waits for the store).

        Raises:
            UnresolvedBookieError: registered nowhere (down), or a named id with no store to
                look in, or the store did not answer.
        """
        if self._store is None:
            address = split_address(bookie_id)
            if address is None:
                raise UnresolvedBookieError(f"bookie {bookie_id!r} is not host:port, and there "
                                            f"is no metadata store to find its address in")
            return Target(address[0], address[1], self._pinned.get(bookie_id))
        if fresh or self._known.get(bookie_id) is None:  # unknown, or not registered when
            # last seen: read it now (a bookie that came back is not down for a stale view)
            self._watch(bookie_id)  # before the read: a change after it is not missed
            self._update(bookie_id, self._read(bookie_id))
        known = self._known.get(bookie_id)
        if known is None:
            raise UnresolvedBookieError(f"bookie {bookie_id} is not registered (down): its "
                                        f"address is unknown")
        return known

    def known(self, bookie_id: str) -> Target | None:
        """The last registration seen for ``bookie_id`` (None: none, or never looked up);
        reads nothing."""
        with self._lock:
            return self._known.get(bookie_id)

    def forget(self, bookie_id: str) -> None:
        """A connection to ``bookie_id`` failed: read its registration again, on a thread of
        its own (never waits for the store: safe on an I/O loop); a new address or key, or no
        registration, is taken and reported to ``on_moved``."""
        with self._lock:
            if self._store is None or bookie_id not in self._known \
                    or bookie_id in self._refreshing:
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
        except Exception as e:  # noqa: BLE001 - a store closed meanwhile: keep what is known
            log.debug("re-reading the registration of %s: %s", bookie_id, e)
            return
        finally:
            with self._lock:
                self._refreshing.discard(bookie_id)
        self._update(bookie_id, found)

    def _read(self, bookie_id: str) -> Target | None:
        try:
            info = self._store.bookie_info(bookie_id)
        except (MetadataError, ValueError) as e:
            raise UnresolvedBookieError(f"looking up bookie {bookie_id}: {e}") from None
        return target_of(info)

    def _update(self, bookie_id: str, found: Target | None) -> None:
        with self._lock:
            before = self._known.get(bookie_id)
            # Sockets can point at a wrong place only after a registration that was seen goes
            # or moves: tell on_moved then (its sockets are dropped).  Back from no
            # registration, no socket was made meanwhile (resolving failed), so nothing is
            # dropped: a socket made at once for the new registration must not be reset, nor
            # the requests already sent on it.
            changed = before is not None and before != found
            self._known[bookie_id] = found
        if not changed:
            return
        if found is None:
            log.info("bookie unregistered", extra={"fields": {"bookie": bookie_id}})
        else:
            log.info("bookie moved", extra={"fields": {"bookie": bookie_id,
                                                       "address": f"{found.host}:{found.port}"}})
        for listener in list(self.on_moved):
            listener(bookie_id)

    def _watch(self, bookie_id: str) -> None:
        """Watch ``bookie_id``'s registration, writable and read-only, from the first time it
        is resolved.  A node watch, not a membership watch: a restart on another port that
        leaves the list of ids as it was is still a change of the node's data.  Any change is
        read again whole (the registration may have moved between writable and read-only)."""
        with self._lock:
            if bookie_id in self._cancels or self._closed:
                return
            self._cancels[bookie_id] = []

        def changed(data, _version) -> None:
            if data:
                try:
                    found = target_of(orjson.loads(data))
                except orjson.JSONDecodeError:
                    found = None
                if found is not None:
                    self._update(bookie_id, found)
                    return
            self.forget(bookie_id)  # gone here: maybe registered under the other node
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
