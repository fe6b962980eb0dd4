"""The Merkle root a recovery closes a verifiable ledger with (issue 43).

A recovering client did not write the ledger, so it has no tree: before its close it reads
entries 0 .. L (L: the last entry recovery found) where the old writer wrote them, one good copy
of each (a ``ReadOp``: a replica with a bad digest is skipped), and hashes their payloads in
order.  The root is then exactly that of the entries the ledger closes with.  A read that fails
fails the recovery (nothing is written: the ledger stays IN_RECOVERY and a later recovery starts
over), since a close without its root is refused (docs/metadata.md, format 2).
"""

from __future__ import annotations

from bookie.client.merkle import MerkleTree
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.reader import Deliver, ReadOp


class RootReading:
    """Read entries 0 .. ``last`` and hash them: ``root_hex`` once ``done`` without ``error``."""

    def __init__(self, info: LedgerInfo, last: int, decode, avoid=frozenset()):
        """``avoid``: bookies known gone or failed, asked last."""
        self.tree = MerkleTree()
        self.op = ReadOp(info, 0, last, decode, avoid=frozenset(avoid)) if last >= 0 else None
        self.done = self.op is None
        self.error = None

    @property
    def root_hex(self) -> str:
        return self.tree.root_hex()

    def start(self) -> list:
        return self._take(self.op.start()) if self.op is not None else []

    def handle(self, event, now: float = 0.0) -> list:
        return self._take(self.op.handle(event, now)) if not self.done else []

    def _take(self, actions) -> list:
        out = []
        for a in actions:
            if isinstance(a, Deliver):
                for entry in a.entries:
                    self.tree.append(entry.data)
            elif isinstance(a, A.Finished):
                self.done, self.error = True, a.error
            else:
                out.append(a)
        return out
