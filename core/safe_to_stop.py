"""Whether some bookies may stop now: which ledgers would fall below their ack quorum, become
unreadable, or lose their last live copy if they went down (``bookie shell whatif``, the admin
API's ``GET /api/v1/bookie/safe_to_stop``, ``decommissionbookie``'s warning).

Theory of operation.  Entry ``e`` of a fragment lives on its *write set*: the ``Qw`` bookies
from position ``e % E`` of the fragment's ensemble on.  A fragment holding ``n`` entries uses
``min(n, E)`` distinct write sets; the last fragment of a ledger that is not closed may still
get entries, so all ``E`` of its write sets count.  A bookie is *live* when it is registered
(writable or read-only: both serve reads).  For every write set that the stop touches (it names
a bookie to stop), with ``live`` its bookies live after the stop:

1. ``last_copy``: ``live == 0`` while one was live before: the stopped bookies hold the only
   live copies of those entries (a decommission that wiped them would lose the entries).
2. ``unreadable``: ``live == 0`` (those entries cannot be read while the bookies are down), or,
   for a ledger not closed, a write set of its last fragment with fewer than ``Qw - Qa + 1``
   live bookies: it can then be neither fenced nor recovered, so no reader can open it.
3. ``below_ack_quorum``: ``live < Qa``: fewer live copies than each entry was acknowledged
   with (and, for an open ledger, adds to that write set wait for an ensemble change).

Stopping is safe when no ledger is in any of the three.  Pure: the caller reads the metadata
and the registrations; nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Protocol

CATEGORIES = ("below_ack_quorum", "unreadable", "last_copy")


class LedgerLike(Protocol):
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    last_entry_id: int
    fragments: list  # [(first_entry_id, [bookie, ...]), ...]


@dataclasses.dataclass
class StopVerdict:
    """What stopping ``stopping`` would do; each list holds ledger ids, ascending."""

    stopping: list[str]
    below_ack_quorum: list[int] = dataclasses.field(default_factory=list)
    unreadable: list[int] = dataclasses.field(default_factory=list)
    last_copy: list[int] = dataclasses.field(default_factory=list)

    @property
    def safe(self) -> bool:
        return not (self.below_ack_quorum or self.unreadable or self.last_copy)

    def as_dict(self) -> dict:
        return {"safe": self.safe, "bookies": self.stopping,
                **{c: getattr(self, c) for c in CATEGORIES}}


def write_sets(ledger: LedgerLike, closed: bool) -> Iterable[tuple[list[str], bool]]:
    """Every write set holding (or, in the last fragment of a ledger not closed, able to get)
    entries: ``(bookies, in_open_tail)``."""
    e_size, qw = ledger.ensemble_size, ledger.write_quorum
    frags = ledger.fragments
    for i, (first, ensemble) in enumerate(frags):
        tail = i == len(frags) - 1
        if tail and not closed:
            starts, open_tail = range(e_size), True
        else:
            end = frags[i + 1][0] - 1 if not tail else ledger.last_entry_id
            n = end - first + 1
            if n <= 0:
                continue
            starts, open_tail = range(first, first + min(n, e_size)), False
        for start in starts:
            yield [ensemble[(start + k) % e_size] for k in range(qw)], open_tail


def ledger_effects(ledger: LedgerLike, closed: bool, live: set[str],
                   stopping: set[str]) -> set[str]:
    """The categories (``CATEGORIES``) stopping ``stopping`` puts this ledger in, given the
    bookies ``live`` now."""
    found: set[str] = set()
    recover_need = ledger.write_quorum - ledger.ack_quorum + 1
    for bookies, open_tail in write_sets(ledger, closed):
        if not stopping.intersection(bookies):
            continue
        before = sum(1 for b in bookies if b in live)
        after = sum(1 for b in bookies if b in live and b not in stopping)
        if after == 0:
            found.add("unreadable")
            if before > 0:
                found.add("last_copy")
        elif open_tail and after < recover_need:
            found.add("unreadable")
        if after < ledger.ack_quorum:
            found.add("below_ack_quorum")
    return found


def check_stop(ledgers: Iterable[tuple[int, LedgerLike, bool]], live: Iterable[str],
               stopping: Iterable[str]) -> StopVerdict:
    """The verdict for stopping ``stopping``.

    Args:
        ledgers: ``(ledger_id, metadata, closed)`` for every ledger to consider.
        live: the bookies registered now (writable or read-only).
        stopping: the bookies that would go down.
    """
    stop, up = set(stopping), set(live)
    verdict = StopVerdict(sorted(stop))
    for ledger_id, ledger, closed in ledgers:
        for category in ledger_effects(ledger, closed, up, stop):
            getattr(verdict, category).append(ledger_id)
    for category in CATEGORIES:
        getattr(verdict, category).sort()
    return verdict
