"""Leases: the embedded store's stand-in for ZooKeeper sessions.

A store takes a lease when it first creates an ephemeral node and renews it from a thread every
lease/4.  A lease is alive while the host's boot id matches and the monotonic clock is before
its deadline: readers compare on every read, so the nodes of a dead process vanish for everyone
when its lease runs out, even if nobody cleans up.  Writers (lease renewals, creates that meet
an expired node) delete expired leases and their nodes.  If a store finds its own lease expired
(it was stopped for longer than the lease), its ephemeral nodes are gone, as with an expired
ZooKeeper session; it takes a new lease and re-registers its bookies.

``LeaseRules`` holds those rules as operations inside a caller's LMDB transaction (records in
``embedded_env``); the store owns the lease id and the renewal thread.
"""

from __future__ import annotations

from typing import Callable

import lmdb

from bookie.metadata.embedded_env import ID_KEY, LEASE, NODE, U64


def next_counter(txn: lmdb.Transaction, dbs: dict, key: bytes, start: int = 0) -> int:
    """Return the counter ``key`` of the ``meta`` database and advance it by one."""
    raw = txn.get(key, db=dbs["meta"])
    value = U64.unpack(raw)[0] if raw is not None else start
    txn.put(key, U64.pack(value + 1), db=dbs["meta"])
    return value


class LeaseRules:
    """What a lease is and how it ends, for one host (boot id) and lease length.

    Invariant: an ephemeral node is visible only while the lease it names is alive; dropping a
    lease deletes exactly the nodes that lease still owns, in the same transaction.
    """

    def __init__(self, boot: bytes, lease_ms: int, clock_ns: Callable[[], int]):
        self.boot = boot
        self.lease_ms = int(lease_ms)
        self.clock_ns = clock_ns

    def alive(self, txn: lmdb.Transaction, dbs: dict, lease_id: int) -> bool:
        """True for persistent nodes (lease 0) and for a lease of this boot before its deadline."""
        if lease_id == 0:
            return True
        raw = txn.get(ID_KEY.pack(lease_id), db=dbs["leases"])
        if raw is None:
            return False
        boot, deadline_ns = LEASE.unpack(raw)
        return boot == self.boot and self.clock_ns() < deadline_ns

    def put(self, txn: lmdb.Transaction, dbs: dict, lease_id: int) -> None:
        """Create or extend a lease: alive for lease_ms from now."""
        deadline = self.clock_ns() + self.lease_ms * 1_000_000
        txn.put(ID_KEY.pack(lease_id), LEASE.pack(self.boot, deadline), db=dbs["leases"])

    def take(self, txn: lmdb.Transaction, dbs: dict) -> int:
        """A new lease, alive for lease_ms; its id is never handed out again."""
        lease_id = next_counter(txn, dbs, b"next_lease_id", start=1)
        self.put(txn, dbs, lease_id)
        return lease_id

    def drop(self, txn: lmdb.Transaction, dbs: dict, lease_id: int) -> None:
        """Delete a lease and every ephemeral node it still owns."""
        owned, nodes = dbs["owned"], dbs["nodes"]
        prefix = ID_KEY.pack(lease_id)
        cursor = txn.cursor(db=owned)
        doomed = []
        if cursor.set_range(prefix):
            for key in cursor.iternext(values=False):
                if not key.startswith(prefix):
                    break
                doomed.append(key)
        for key in doomed:
            txn.delete(key, db=owned)
            node_key = key[len(prefix):]
            raw = txn.get(node_key, db=nodes)
            if raw is not None and NODE.unpack_from(raw)[1] == lease_id:
                txn.delete(node_key, db=nodes)
        txn.delete(prefix, db=dbs["leases"])

    def reap_expired(self, txn: lmdb.Transaction, dbs: dict) -> None:
        """Drop every lease that is no longer alive (and its nodes)."""
        expired = [ID_KEY.unpack(key)[0]
                   for key in txn.cursor(db=dbs["leases"]).iternext(values=False)
                   if not self.alive(txn, dbs, ID_KEY.unpack(key)[0])]
        for lease_id in expired:
            self.drop(txn, dbs, lease_id)

    def renew(self, txn: lmdb.Transaction, dbs: dict, lease_id: int) -> tuple[int, bool]:
        """Extend ``lease_id``, or replace it with a new lease if it has expired meanwhile (its
        nodes are then gone); reap other expired leases.  Returns ``(lease id, lost)``."""
        lost = not self.alive(txn, dbs, lease_id)
        if lost:
            self.drop(txn, dbs, lease_id)
            lease_id = next_counter(txn, dbs, b"next_lease_id", start=1)
        self.put(txn, dbs, lease_id)
        self.reap_expired(txn, dbs)
        return lease_id, lost
