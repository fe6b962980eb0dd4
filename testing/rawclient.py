"""A minimal synchronous wire-protocol client for one bookie: for tests and diagnostics.

It reaches a bookie as the replication client does: the bookie's registration names its
address and the key it must prove (``bookie.client.resolver``), looked up in the store of the
``LocalBookies`` of this process when no resolver is given (``learn_store``), so
``RawBookieClient(ens.bookies[0])`` needs nothing more.

It bypasses every quorum rule (that is the replication client's job, ``bookie.client``) and
speaks the frames of ``bookie.wire`` directly, one request at a time or pipelined.

A bookie with a metadata store stores nothing under a ledger id the store does not know, and
only for the key the ledger's metadata names (``bookie.core.ledgers``, invariant 1): a raw test
that writes to ids of its own choosing first makes the store know them (``create_ledgers``, which
needs the store's own access, as a writer's client has).  A bookie run without a metadata store
binds each id to the key of its first add.
"""

from __future__ import annotations

import itertools

import orjson
import zmq

from bookie import wire
from bookie.client.connection import ADD, READ, connect
from bookie.client.resolver import BookieResolver, UnresolvedBookieError
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, make_key_check
from bookie.wire import Flag, Op, Status


class BookieTimeout(TimeoutError):
    pass


# Metadata stores this process's bookies register in (``LocalBookies`` adds its own while it
# runs): a raw client given no resolver finds its bookie's registration, address and key there,
# as the replication client does.  URI -> [BookieResolver, store, how many learnt it].
_stores: dict[str, list] = {}


def learn_store(metadata_uri: str, zk_security=None) -> None:
    """Let raw clients made with no resolver look bookies up in ``metadata_uri`` (until as
    many ``forget_store`` calls).  Raises MetadataError when the store cannot be opened."""
    if not metadata_uri:
        return
    entry = _stores.get(metadata_uri)
    if entry is None:
        store = open_metadata(metadata_uri, zk_security=zk_security)
        entry = _stores[metadata_uri] = [BookieResolver(store), store, 0]
    entry[2] += 1


def forget_store(metadata_uri: str) -> None:
    """Undo one ``learn_store`` (``LocalBookies.close``)."""
    entry = _stores.get(metadata_uri)
    if entry is None:
        return
    entry[2] -= 1
    if entry[2] <= 0:
        del _stores[metadata_uri]
        entry[0].close()
        entry[1].close()


_keys: dict[str, bytes] = {}  # address -> key of a bookie run without a store (learn_key)


def learn_key(address: str, public_key: bytes | None) -> None:
    """The key of the bookie at ``address``, run without a metadata store (no registration
    publishes it): ``LocalBookies`` reads it from the bookie's cookie.  None: forget it."""
    if public_key is None:
        _keys.pop(address, None)
    else:
        _keys[address] = public_key


def known_resolver(bookie_id: str):
    """The resolver of a learnt store where ``bookie_id`` is registered now, else one that
    pins a learnt key (``learn_key``), else None."""
    if bookie_id in _keys:
        return BookieResolver(None, pinned={bookie_id: _keys[bookie_id]})
    for resolver, _store, _n in list(_stores.values()):
        try:
            resolver.resolve(bookie_id, fresh=True)  # a raw client reads the registration afresh
            return resolver
        except UnresolvedBookieError:
            if resolver.known(bookie_id) is not None:
                return resolver  # the store did not answer: the last registration seen
            continue
    return None


class RawBookieClient:
    def __init__(self, bookie_id: str, timeout_s: float = 10.0, ctx: zmq.Context | None = None,
                 curve=None, resolver=None, local: bool = False):
        """``curve``: the client's keys (a ``bookie.client.auth.ClientCurve``; None: an
        ephemeral keypair).  ``resolver``: a ``bookie.client.resolver.BookieResolver`` over the
        metadata store where the bookie registers (its address and the key it must prove);
        None: the stores of this process's ``LocalBookies`` (``learn_store``), else
        ``bookie_id`` is an address and ``curve`` pins the key (``curveServerKeys``).
        ``local``: connect over the bookie's local sockets where its registration publishes
        trusted ones (bookie.client.local_sockets); by default TCP, as a raw client is for
        tests of the wire and of the TCP sockets' guards."""
        self.ctx = ctx or zmq.Context.instance()
        self.timeout_ms = int(timeout_s * 1000)
        if resolver is None:
            resolver = known_resolver(bookie_id)
        self.add_sock = connect(self.ctx, bookie_id, ADD, curve, resolver=resolver, local=local)
        self.read_sock = connect(self.ctx, bookie_id, READ, curve, resolver=resolver, local=local)
        self._ids = itertools.count(1)

    def close(self) -> None:
        self.add_sock.close()
        self.read_sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- plumbing ----------------------------------------------------------------------------------
    def request(self, sock, op, ledger_id, flags=0, body=()) -> tuple[int, list]:
        rid = next(self._ids)
        sock.send_multipart([wire.pack_header(op, flags, rid, ledger_id), *body])
        return self.wait(sock, rid)

    def wait(self, sock, rid: int) -> tuple[int, list]:
        while True:
            if not sock.poll(self.timeout_ms):
                raise BookieTimeout(f"no answer to request {rid} in {self.timeout_ms} ms")
            frames = sock.recv_multipart()
            _, status, got, _ = wire.unpack_header(frames[0])
            if got == rid:
                return status, frames[1:]

    # -- ops ---------------------------------------------------------------------------------------
    def add(self, ledger_id: int, entries: list[bytes], master_key: bytes, recovery: bool = False) -> int:
        lengths, data = wire.pack_batch(entries)
        flags = Flag.RECOVERY_ADD if recovery else 0
        status, _ = self.request(self.add_sock, Op.ADD, ledger_id, flags, [master_key, lengths, data])
        return status

    def send_add(self, ledger_id: int, entries: list[bytes], master_key: bytes) -> int:
        """Pipelined: send and return the request id; collect with ``wait(add_sock, rid)``."""
        rid = next(self._ids)
        lengths, data = wire.pack_batch(entries)
        self.add_sock.send_multipart([wire.pack_header(Op.ADD, 0, rid, ledger_id), master_key, lengths, data])
        return rid

    def read(self, ledger_id: int, first: int, max_count: int = 1, fence_key: bytes | None = None):
        """Returns (status, [entry bytes])."""
        body = [wire.READ_BODY.pack(first, max_count)]
        flags = 0
        if fence_key is not None:
            flags = Flag.FENCE
            body.append(fence_key)
        status, frames = self.request(self.read_sock, Op.READ, ledger_id, flags, body)
        if status != Status.OK:
            return status, []
        return status, [bytes(e) for e in wire.split_batch(frames[0], frames[1])]

    def read_lac(self, ledger_id: int, fence_key: bytes | None = None,
                 long_poll: tuple[int, int] | None = None):
        """Returns (status, lac, last_entry_id)."""
        flags = 0
        body = []
        if long_poll is not None:
            flags |= Flag.LONG_POLL
            body.append(wire.LONG_POLL_BODY.pack(*long_poll))
        if fence_key is not None:
            flags |= Flag.FENCE
            body.append(fence_key)
        status, frames = self.request(self.read_sock, Op.READ_LAC, ledger_id, flags, body)
        if status != Status.OK:
            return status, None, None
        lac, last = wire.LAC_BODY.unpack(frames[0])
        return status, lac, last

    def fence(self, ledger_id: int, master_key: bytes) -> int:
        return self.read_lac(ledger_id, fence_key=master_key)[0]

    def write_lac(self, ledger_id: int, lac: int, master_key: bytes) -> int:
        status, _ = self.request(self.add_sock, Op.WRITE_LAC, ledger_id, 0,
                                 [master_key, wire.WRITE_LAC_BODY.pack(lac)])
        return status

    def info(self) -> dict:
        status, frames = self.request(self.add_sock, Op.INFO, 0)
        if status != Status.OK:
            raise RuntimeError(f"INFO answered {status}")
        return orjson.loads(frames[0])


def make_entry(ledger_id: int, entry_id: int, payload: bytes, lac: int = -1) -> bytes:
    """An entry with a zero 8-byte digest field (the bookie never checks digests)."""
    return wire.pack_entry(ledger_id, entry_id, lac, 0, b"\0" * 8, payload)


def create_ledgers(metadata_uri: str, ledger_ids, master_key: bytes | None, zk_security=None,
                   ensemble: list[str] | None = None) -> None:
    """Make the metadata store know ``ledger_ids`` (ids a raw test chose), owned by
    ``master_key`` (its ``key_check`` in each record; None: no check, as an older client's
    ledger, bound on each bookie by its first add).  ``ensemble``: the bookies of the ledgers'
    one fragment (default: every bookie registered now: a bookie refuses normal adds of a ledger
    whose metadata does not name it; a placeholder when none is)."""
    store = open_metadata(metadata_uri, zk_security=zk_security)
    try:
        ensemble = list(ensemble or sorted(store.registered_bookies()) or ["127.0.0.1:1"])
        n = len(ensemble)
        for ledger_id in ledger_ids:
            meta = LedgerMetadata(n, n, n, fragments=[(0, ensemble)],
                                  key_check=make_key_check(master_key) if master_key else b"")
            store._write_raw_ledger(ledger_id, meta.to_bytes())
    finally:
        store.close()
