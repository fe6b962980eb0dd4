"""Ledger metadata as the protocol sees it, and the decisions taken on it.

Theory of operation
-------------------
``LedgerInfo`` is the part of a ledger's metadata the replication protocol reads and writes:
quorum sizes, state, last entry, length and fragments.  The I/O layer converts it to and from
the metadata store's record; every change is written with compare-and-swap (CAS) on the
record's version, and every CAS failure is answered by re-reading and deciding again with the
pure functions below:

* ``choose_ensemble`` - E distinct writable bookies for a new ledger.
* ``replace_bookies`` - a new fragment starting at the first unconfirmed entry, with the failed
  bookies replaced by writable ones not already in the ensemble.
* ``close_decision`` - a writer's close after a CAS failure: retry while OPEN, fail if
  IN_RECOVERY, succeed only if CLOSED at our last confirmed entry.
* ``recovery_start`` - what opening with recovery does in each state.
* ``recovery_close_decision`` - a recovering reader's close after a CAS failure: adopt a close
  made by someone else (all recoveries converge on the first close), retry otherwise.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from bookie.metadata.ledger import LedgerState


@dataclasses.dataclass(frozen=True)
class LedgerInfo:
    """Protocol view of a ledger's metadata.  ``fragments`` is ((first_entry_id, ensemble), ...)
    in increasing first_entry_id, each ensemble a tuple of E bookie ids ("host:port", or a bookieId: bookie.client.resolver).
    ``state`` is the metadata store's ``LedgerState`` (a state given as its name is converted,
    so every state test can use ``is``)."""

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    fragments: tuple[tuple[int, tuple[str, ...]], ...] = ()
    verifiable: bool = False  # issue 43: the close carries the Merkle root of the entries
    merkle_root: str = ""  # verifiable: hex root of entries 0..last_entry_id, set by the close

    def __post_init__(self) -> None:
        if type(self.state) is not LedgerState:
            object.__setattr__(self, "state", LedgerState(self.state))

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble of the fragment holding ``entry_id``."""
        found = self.fragments[0][1]
        for first, ensemble in self.fragments:
            if first > entry_id:
                break
            found = ensemble
        return found

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.fragments[-1][1]

    @property
    def last_fragment_first(self) -> int:
        return self.fragments[-1][0]

    def replace(self, **changes) -> "LedgerInfo":
        return dataclasses.replace(self, **changes)


class Decision:
    """Outcomes of the CAS decisions (plain strings, so they print well in tests)."""

    RETRY = "retry"  # write again with the re-read version
    DONE = "done"  # the metadata already says what we wanted
    FENCED = "fenced"  # someone is recovering the ledger
    CLOSED_ELSEWHERE = "closed_elsewhere"  # closed at an entry other than ours
    RECOVER = "recover"  # opening: go on with fencing and recovery
    NO_RECOVERY_NEEDED = "no_recovery_needed"  # opening: already closed


def choose_ensemble(ensemble_size: int, writable: Sequence[str], rng: random.Random | None = None,
                    exclude=()) -> tuple[str, ...] | None:
    """E distinct bookies from ``writable`` (minus ``exclude``), or None when there are too few.

    The choice is random so that ledgers spread over the bookies.
    """
    candidates = sorted(set(writable) - set(exclude))
    if len(candidates) < ensemble_size:
        return None
    return tuple((rng or random).sample(candidates, ensemble_size))


def replace_bookies(info: LedgerInfo, ensemble: Sequence[str], failed_positions: Sequence[int],
                    writable: Sequence[str], first_entry_id: int,
                    rng: random.Random | None = None, placement=None) -> LedgerInfo | None:
    """Metadata with a fragment starting at ``first_entry_id`` whose ensemble is ``ensemble``
    with each failed position replaced by a writable bookie not already in the ensemble.

    If the last fragment already starts at ``first_entry_id`` (nothing was written to it), it is
    replaced instead of followed, so no empty fragment is recorded.

    ``placement`` (a ``Placement``): replacements keep the write sets spread over racks or
    regions (client/protocol/placement.py); None: at random.

    Returns:
        the new LedgerInfo, or None when there are not enough writable bookies.
    """
    failed = set(failed_positions)
    keep = [b for p, b in enumerate(ensemble) if p not in failed]
    exclude = set(ensemble)
    candidates = sorted(set(writable) - exclude)
    if len(candidates) < len(failed):
        return None
    if placement is not None:  # a client.protocol.placement.Placement: keep the spread
        new_ensemble = placement.replace(ensemble, sorted(failed), info.write_quorum, writable,
                                         rng)
    else:
        picks = iter((rng or random).sample(candidates, len(failed)))
        new_ensemble = tuple(next(picks) if p in failed else b for p, b in enumerate(ensemble))
    assert len(set(new_ensemble)) == len(new_ensemble) and set(keep) <= set(new_ensemble)
    fragments = list(info.fragments)
    if fragments and fragments[-1][0] >= first_entry_id:
        fragments = [f for f in fragments if f[0] < first_entry_id]
    fragments.append((first_entry_id, new_ensemble))
    return info.replace(fragments=tuple(fragments))


def ensemble_change_conflict(reread: LedgerInfo) -> str:
    """After a failed CAS of an ensemble change: retry while OPEN, else the adds must fail."""
    if reread.state is LedgerState.OPEN:
        return Decision.RETRY
    if reread.state is LedgerState.IN_RECOVERY:
        return Decision.FENCED
    return Decision.CLOSED_ELSEWHERE


def close_decision(reread: LedgerInfo, our_last_entry_id: int) -> str:
    """A writer's close lost its CAS; decide from the re-read metadata (protocol: 'Closing a
    ledger as a writer')."""
    if reread.state is LedgerState.OPEN:
        return Decision.RETRY
    if reread.state is LedgerState.IN_RECOVERY:
        return Decision.FENCED
    if reread.last_entry_id == our_last_entry_id:
        return Decision.DONE
    return Decision.CLOSED_ELSEWHERE


def recovery_start(info: LedgerInfo) -> str:
    """Opening with recovery: CLOSED needs nothing; OPEN must first be CAS'd to IN_RECOVERY
    (RETRY means 'write IN_RECOVERY'); IN_RECOVERY (a crashed or concurrent recovery) goes
    straight on to fencing."""
    if info.state is LedgerState.CLOSED:
        return Decision.NO_RECOVERY_NEEDED
    if info.state is LedgerState.OPEN:
        return Decision.RETRY
    return Decision.RECOVER


def recovery_close_decision(reread: LedgerInfo) -> str:
    """A recovering reader's close lost its CAS.  If another client closed the ledger, take its
    last entry (this is how concurrent recoveries converge); otherwise write again."""
    if reread.state is LedgerState.CLOSED:
        return Decision.DONE
    return Decision.RETRY
