"""What outlives a round: the ledgers kept after their round's check, and those deleted.

After a round's check every ledger with acknowledged entries that recovery closed is *kept*:
its acknowledged entries (entry id -> (writer, seq), the payload is ``make_payload``'s) stay
known to the checker for the rest of the run.  A share of them (``keep_share``, drawn from the
seed and the ledger id) lives for the whole run; the others are handed to the next round's
deleter (``due_for_delete``), which deletes them while that round's faults happen.  A delete
that was acknowledged moves the ledger to ``deleted``: from then on the store must never
list it again.  A delete that failed may or may not have happened: the next quiescent point
looks (``settle_failed_deletes``).

Pure state: the runner does the reading and the deleting.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bookie.testing.nemesis.payload import make_payload


@dataclass
class Kept:
    ledger_id: int
    acked: dict[int, tuple[str, int]]
    last: int
    round_no: int
    whole_run: bool

    def expected(self) -> dict[int, bytes]:
        return {e: make_payload(w, s) for e, (w, s) in self.acked.items()}


@dataclass
class Catalogue:
    seed: int
    keep_share: float = 0.25
    kept: dict[int, Kept] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    maybe_deleted: set[int] = field(default_factory=set)  # a delete failed: look next time

    def add_round(self, round_no: int, events: list[dict], finals: dict) -> None:
        """Keep every ledger of the round that recovery closed and that has acknowledged
        entries (``finals``: ledger id -> ``checker.FinalLedger``)."""
        for ledger_id, acked in acked_entries(events).items():
            final = finals.get(ledger_id)
            if final is None or final.last_entry is None or not acked:
                continue
            rng = random.Random(f"keep:{self.seed}:{ledger_id}")
            self.kept[ledger_id] = Kept(ledger_id, acked, final.last_entry, round_no,
                                        rng.random() < self.keep_share)

    def due_for_delete(self, round_no: int) -> list[int]:
        """Ledgers kept from earlier rounds that the round ``round_no``'s deleter deletes."""
        return sorted(k.ledger_id for k in self.kept.values()
                      if not k.whole_run and k.round_no < round_no)

    def note_deletes(self, events: list[dict]) -> None:
        for ev in events:
            if ev["ev"] == "deleted":
                self.kept.pop(ev["l"], None)
                self.deleted.add(ev["l"])
                self.maybe_deleted.discard(ev["l"])
            elif ev["ev"] == "delete_fail":
                self.maybe_deleted.add(ev["l"])

    def settle_failed_deletes(self, exists) -> None:
        """A failed delete that took effect counts as a delete (``exists(ledger_id)``)."""
        for ledger_id in sorted(self.maybe_deleted):
            if not exists(ledger_id):
                self.kept.pop(ledger_id, None)
                self.deleted.add(ledger_id)
        self.maybe_deleted.clear()


def acked_entries(events: list[dict]) -> dict[int, dict[int, tuple[str, int]]]:
    """Ledger id -> entry id -> (writer, seq) of every acknowledged add in ``events``."""
    out: dict[int, dict[int, tuple[str, int]]] = {}
    for ev in events:
        if ev["ev"] == "ack":
            entries = out.setdefault(ev["l"], {})
            for i in range(ev["n"]):
                entries[ev["e"] + i] = (ev["w"], ev["s"] + i)
    return out
