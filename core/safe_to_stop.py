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
4. ``stalled``: a ledger not closed with a write set of its last fragment below ``Qa`` and too
   few writable bookies outside its ensemble (after the stop) to replace every one of its
   ensemble's bookies that is down: its writer cannot go on.

Two verdicts.  *Strict* (``whatif --strict``): safe when no ledger is in any category.  For a
rolling restart (the default): safe when no ledger is ``last_copy``, ``unreadable`` or
``stalled``; a ledger only ``below_ack_quorum`` keeps a live copy of every entry and its writer
goes on: reduced redundancy until the bookie is back (``reduced_redundancy``), a warning, not
a refusal.  Pure: the caller reads the metadata and the registrations; nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Protocol

CATEGORIES = ("below_ack_quorum", "unreadable", "last_copy", "stalled")
BLOCKING = ("unreadable", "last_copy", "stalled")  # what a rolling restart must not do


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
    stalled: list[int] = dataclasses.field(default_factory=list)
    strict: bool = False

    @property
    def safe(self) -> bool:
        """Safe under this verdict's rule: strict, or for a rolling restart."""
        return not any(getattr(self, c) for c in (CATEGORIES if self.strict else BLOCKING))

    @property
    def reduced_redundancy(self) -> list[int]:
        """Ledgers only below their ack quorum: every entry keeps a live copy, writers go on."""
        blocked = {i for c in BLOCKING for i in getattr(self, c)}
        return [i for i in self.below_ack_quorum if i not in blocked]

    def as_dict(self) -> dict:
        return {"safe": self.safe, "strict": self.strict, "bookies": self.stopping,
                **{c: getattr(self, c) for c in CATEGORIES},
                "reduced_redundancy": self.reduced_redundancy}


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
                   stopping: set[str], writable: set[str] | None = None) -> set[str]:
    """The categories (``CATEGORIES``) stopping ``stopping`` puts this ledger in, given the
    bookies ``live`` now (``writable``: those of them taking new entries; default all)."""
    found: set[str] = set()
    recover_need = ledger.write_quorum - ledger.ack_quorum + 1
    tail_below_qa = False
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
            tail_below_qa = tail_below_qa or open_tail
    if tail_below_qa and not _writer_goes_on(ledger, live, stopping,
                                             live if writable is None else writable):
        found.add("stalled")
    return found


def _writer_goes_on(ledger: LedgerLike, live: set[str], stopping: set[str],
                    writable: set[str]) -> bool:
    """Whether an ensemble change can replace every bookie of the last ensemble that is down
    after the stop with a writable bookie outside that ensemble."""
    ensemble = set(ledger.fragments[-1][1])
    down = {b for b in ensemble if b not in live or b in stopping}
    spare = (set(writable) & set(live)) - stopping - ensemble
    return len(spare) >= len(down)


def check_stop(ledgers: Iterable[tuple[int, LedgerLike, bool]], live: Iterable[str],
               stopping: Iterable[str], writable: Iterable[str] | None = None,
               strict: bool = False) -> StopVerdict:
    """The verdict for stopping ``stopping``.

    Args:
        ledgers: ``(ledger_id, metadata, closed)`` for every ledger to consider.
        live: the bookies registered now (writable or read-only).
        stopping: the bookies that would go down.
        writable: the live bookies taking new entries (default: every live one).
        strict: any ledger below its ack quorum makes the stop unsafe.
    """
    stop, up = set(stopping), set(live)
    able = up if writable is None else set(writable)
    verdict = StopVerdict(sorted(stop), strict=strict)
    for ledger_id, ledger, closed in ledgers:
        for category in ledger_effects(ledger, closed, up, stop, able):
            getattr(verdict, category).append(ledger_id)
    for category in CATEGORIES:
        getattr(verdict, category).sort()
    return verdict
