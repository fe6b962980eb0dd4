"""Write sets and quorum coverage: which bookies hold an entry, and when enough have answered.

Theory of operation
-------------------
A fragment's ensemble is a list of E bookies; a bookie is named here by its *position* in that
list (0..E-1), so this module never sees addresses.  Entry ``e`` is written to the write set of
Qw positions starting at ``e % E`` and wrapping around (round-robin striping), so an ensemble
has exactly E distinct write sets, one per starting position.

Two questions are answered here and nowhere else:

* **Ack quorum** - an entry is replicated enough once Qa positions of *its* write set acked it.
* **Coverage** - a fence, or a read of the last-add-confirmed, is conclusive once at least
  ``(Qw - Qa) + 1`` positions of *every* write set have answered.  Then no write set has Qa
  positions left that did not answer, so no ack quorum can form behind our back: a fenced
  ledger can no longer acknowledge an add, and the highest LAC among the answers is at least
  the LAC of any entry that was ever acknowledged.

Both are checked in tests against brute-force oracles over every (E, Qw, Qa) with E <= 7 and
every subset of answering positions.
"""

from __future__ import annotations

from functools import lru_cache


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise ValueError unless E >= Qw >= Qa >= 1 (the protocol's creation invariant)."""
    if not (ensemble_size >= write_quorum >= ack_quorum >= 1):
        raise ValueError(
            f"need ensemble_size >= write_quorum >= ack_quorum >= 1, got ensemble_size="
            f"{ensemble_size}, write_quorum={write_quorum}, ack_quorum={ack_quorum}")


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Positions that store ``entry_id``, in order, starting at ``entry_id % E``."""
    return _write_set(entry_id % ensemble_size, ensemble_size, write_quorum)


@lru_cache(maxsize=4096)
def _write_set(start: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    return tuple((start + i) % ensemble_size for i in range(write_quorum))


def in_write_set(position: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """True when the bookie at ``position`` is in the write set of ``entry_id``."""
    return (position - entry_id) % ensemble_size < write_quorum


def write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The E distinct write sets of an ensemble (the one starting at position i is item i)."""
    return tuple(_write_set(i, ensemble_size, write_quorum) for i in range(ensemble_size))


def fence_quorum(write_quorum: int, ack_quorum: int) -> int:
    """Answers needed from every write set for a fence or LAC read to be conclusive."""
    return write_quorum - ack_quorum + 1


class Coverage:
    """Tracks which positions answered a fence / LAC read, and whether that is conclusive.

    Invariant: ``covered`` is true exactly when every write set has at least
    ``(Qw - Qa) + 1`` answered positions.  ``hopeless`` is true exactly when some write set
    has so many failed positions that it can never get there.
    """

    __slots__ = ("ensemble_size", "write_quorum", "ack_quorum", "answered", "failed", "_sets",
                 "_need")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int):
        check_quorums(ensemble_size, write_quorum, ack_quorum)
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.answered: set[int] = set()
        self.failed: set[int] = set()
        self._sets = write_sets(ensemble_size, write_quorum)
        self._need = fence_quorum(write_quorum, ack_quorum)

    def answer(self, position: int) -> None:
        self.answered.add(position)
        self.failed.discard(position)

    def fail(self, position: int) -> None:
        if position not in self.answered:
            self.failed.add(position)

    @property
    def covered(self) -> bool:
        return all(sum(p in self.answered for p in ws) >= self._need for ws in self._sets)

    @property
    def hopeless(self) -> bool:
        # A write set can still be covered only if its not-failed positions are enough.
        return any(sum(p not in self.failed for p in ws) < self._need for ws in self._sets)

    @property
    def all_done(self) -> bool:
        return len(self.answered) + len(self.failed) >= self.ensemble_size


def ack_quorum_reached(acked_positions, entry_id: int, ensemble_size: int, write_quorum: int,
                       ack_quorum: int) -> bool:
    """True when at least Qa positions of the entry's write set are among ``acked_positions``."""
    ws = write_set(entry_id, ensemble_size, write_quorum)
    return sum(p in acked_positions for p in ws) >= ack_quorum
