"""What the add worker's machine may ask of its loop (bookie.core.adds ``View``), and where a
request came from (``Origin``, a ``Request``'s token): read off the rings, the storage, the
held-back answers, the owner resolver and the CURVE gate as they are at the moment of asking."""

from __future__ import annotations

from typing import NamedTuple

from bookie.core.adds import Request
from bookie.storage.ring import READONLY, WRITE


class Origin(NamedTuple):
    """Where a request came from and how to answer it (its ``Request.token``): the client's
    connection and request id, its header frame (its principal), when it was taken; a fence's
    read-worker connection and token (no frame: it carries no client metadata)."""
    ident: bytes
    request_id: object
    frame: object
    taken_at: float


class LoopView:
    """What the add machine may ask of this loop (core/adds.py ``View``), read off the rings,
    the storage, the answers, the owner resolver and the gate as they are now."""

    __slots__ = ("gate", "owners", "pending", "placer", "ring", "rings", "storage", "table")

    def __init__(self, rings, storage, pending, owners, gate, placer):
        self.rings = rings
        self.ring = rings[0]  # the control words
        self.storage = storage
        self.table = storage.table
        self.pending = pending
        self.owners = owners
        self.gate = gate  # workers/auth.py Gate, or None
        self.placer = placer  # its ``safe_to``

    def readonly(self) -> bool:
        return bool(self.ring.get(READONLY))

    def admit(self, r: Request):
        return self.pending.admit(r.journal, r.token.frame, r.token.ident, r.op)

    def role_admin(self, principal) -> bool:
        return self.gate is not None and self.gate.role(principal) == "admin"

    def owner_ready(self, ledger_id: int, key: bytes, credential: bool, lane) -> bool:
        return self.owners.ready(self.table, ledger_id, key, credential, lane)

    def owner(self, ledger_id: int):
        return self.owners.owner(ledger_id)

    def named(self, ledger_id: int):
        return self.owners.named.get(ledger_id)

    def reread_done(self, ledger_id: int) -> bool:
        return ledger_id in self.owners.reread_done

    def reread(self, ledger_id: int) -> bool:
        return self.owners.reread(ledger_id)

    def held_entries(self, ledger_id: int, entry_ids) -> dict:
        return self.storage.held_entries(ledger_id, entry_ids)

    def uncommitted(self, ledger_id: int) -> bool:
        return self.storage.uncommitted(ledger_id)

    def write_position(self, journal: int) -> int:
        return self.rings[journal].get(WRITE)

    def safe_to(self, journal: int) -> int:
        return self.placer.safe_to[journal]

    def ring_free(self, journal: int) -> int:
        return self.rings[journal].free_bytes()

    def ring_capacity(self, journal: int) -> int:
        return self.rings[journal].capacity
