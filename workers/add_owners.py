"""The add worker's waits for the metadata store (workers/claims.py): a request of a ledger the
bookie holds nothing for is parked in the add machine (bookie.core.adds) until the owner
resolver answered - who owns the id, whether the key is the owner's, whether the metadata names
this bookie - and decided again, in order, once it has.  A part of ``AddServer``
(bookie.workers.add_worker), kept apart as one concept: it uses the server's ``storage``,
``owners``, ``machine``, ``current`` and ``handle``.
"""

from __future__ import annotations

from bookie.core.ledgers import Owner, Rejected
from bookie.wire import Status


FENCE_LANE = "fences of the read worker"  # the resolver's lane of fences (``park``)


class OwnerWaits:
    """Parking and resuming the add worker's requests on the owner resolver's answers."""

    def park(self, ledger_id: int, key: bytes, credential: bool) -> bool:
        """True when the message being handled waits (parked in the machine) for what deciding
        it needs: the store's answer about the ledger, or the verdict on its key (claims.py).
        Raises Rejected(TOO_MANY_REQUESTS) past the machine's bound."""
        info = self.storage.table.ledgers.get(ledger_id)
        if info is not None and info.master_key:  # bound: nothing to ask (the hot path)
            return False
        _, frames, internal, _ = self.current  # its principal's turn in the resolver (claims.py)
        # A fence comes from the read worker's control socket: its frames carry no client
        # metadata (reading User-Id there raised EINVAL and killed the worker, under enrolled
        # CURVE, at the first fence of a ledger not in memory: after every restart); fences
        # share one lane of their own.
        principal = FENCE_LANE if internal else \
            self.pending.queues[0].principal(frames[1], frames[0].bytes)
        if self.owners.ready(self.storage.table, ledger_id, key, credential, principal):
            return False
        self.machine.park(ledger_id, self.current)
        return True

    def unnamed(self, ledger_id: int, recovery: bool, credential: bool) -> bool:
        """True when the message being handled waits for one more read of the ledger's metadata
        before it is refused for not naming this bookie (core/adds.py invariant 7)."""
        owners = self.owners
        if not self.storage.table.needs_owner(ledger_id) or self.machine.named_rule(
                owners.named.get(ledger_id), ledger_id in owners.reread_done, recovery,
                credential) is None:
            return False
        if not owners.reread(ledger_id):
            raise Rejected(Status.TOO_MANY_REQUESTS, "metadata reads queued: try again")
        self.machine.park(ledger_id, self.current)
        return True

    def resume(self, ledger_ids: set[int]) -> None:
        """Decide again, in order, the messages parked for these ledgers."""
        for ledger_id in ledger_ids:
            for waiting in self.machine.unpark(ledger_id):
                sock, frames, internal, self.taken_at = waiting
                if not self.handle(sock, frames, internal):
                    self.machine.stall(self.no_room_in, waiting)
            if not self.machine.is_parked(ledger_id):
                self.owners.consume(ledger_id)

    def owner_of(self, ledger_id: int):
        """The metadata store's answer about an id this bookie holds nothing for (None when the
        table holds the ledger: no need to ask)."""
        if not self.storage.table.needs_owner(ledger_id):
            return None
        return self.owners.owner(ledger_id) or Owner.UNAVAILABLE
