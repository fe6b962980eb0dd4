"""Autorecovery's decisions, as plain code: what the auditor marks, what a replication worker
copies where, and how the metadata changes.  No I/O here; ``auditor.py`` and ``replicator.py``
drive these rules with a metadata store and sockets.

Theory of operation
-------------------
A bookie is *lost* once it has been out of the registered set (writable or read-only) for
``lostBookieRecoveryDelay`` seconds without a break, as the auditor saw it (``Membership``).
A bookie that comes back before that is forgotten: nothing is marked, nothing copied.

A ledger *names* a bookie when one of its fragments' ensembles holds it.  The entries a fragment
holds are ``first .. next fragment's first - 1`` (the last fragment: up to ``last_entry_id`` of
a closed ledger; an open ledger's last fragment is unbounded).  Entry ``e`` lives on the write
set of Qw positions starting at ``e % E`` (``client.protocol.quorum.write_set``).

When the metadata may stop naming a bookie, and when a bookie may drop copies it no longer is
named for, is ``bookie.core.naming`` (one rule for autorecovery and the GC); this module applies
it per fragment and position.

The auditor (``audit_ledger``) plans per entry range - per residue class of a fragment, the
entries that share one write set:
* a ledger with some range that names a lost bookie and still has a live copy is marked
  under-replicated, missing those bookies: a worker copies what has a source;
* a range whose whole write set is on lost bookies has no copy left: the ledger is reported once
  as lost (its fragment in the report) and that range is never the reason for a mark, so it is
  never retried.  Both can hold of one ledger (a partial loss): what has a source is copied
  when the position may be repointed (below), the rest reported once;
* a lost bookie at a position that holds no entry of its fragment (a fragment of fewer than
  E entries: a writer replaces a dead bookie at the first entry whose write set holds it, so
  the fragment before names it and holds nothing there) is marked too: the worker repoints it
  without a copy, as it does a fragment with no entries;
* a ledger naming a lost bookie that is gone for good (``naming.gone_for_good``: its cookie
  left the store) is marked even when nothing of it can be copied, so the worker repoints it.

Fencing (``needs_fence``, BookKeeper's rule): an open ledger is fenced and recovered (closed)
only when a lost bookie is in its *last* fragment, the one its writer may still be writing to.
A lost bookie only in earlier fragments is healed by copying those fragments while the ledger
stays open: its writer replaced the bookie itself already, and must not be fenced for it.

A replication worker (``plan_ledger``) heals one (fragment, lost position) at a time (never the
unbounded last fragment of an open ledger: that one is recovered first): entries
of the fragment whose write set holds that position are copied from another, live member of
their write set to a replacement bookie, which must be writable and not in that fragment's
ensemble (so it never already holds a copy and no write set names one bookie twice), chosen by
the client's placement policy (``ensemblePlacementPolicy``, ``choose_replacement``); then the
fragment's ensemble gets the replacement at that position, by compare-and-swap
(``replace_bookie``).  A fragment with no entries is repointed without copying.  A position
some of whose ranges have no live copy (``unhealable``) is repointed only when its bookie is
gone for good (``naming.may_unname``), after the ranges that have a live copy were copied;
otherwise it is reported once and keeps naming its bookie, which may come back with the entries
nobody else holds.  The copy for residue class ``r`` (entries with ``e % E == r``) reads from
one source with a strided read.

A mark is settled (``settle_mark``): removed when the ledger is gone, when none of its missing
bookies is named any more, or when every one of them is registered again (they came back;
what they hold is still theirs).
"""

from __future__ import annotations

import dataclasses
import random

from bookie.client.protocol.quorum import write_set
from bookie.core import naming
from bookie.metadata.ledger import LedgerMetadata, LedgerState

UNBOUNDED = (1 << 63) - 1


# -- membership --------------------------------------------------------------------------------

class Membership:
    """When each bookie left, and which are lost for good.

    ``observe(now_s, registered, known)``: ``registered`` is every bookie registered now,
    ``known`` every bookie the auditor has reason to expect (named by a ledger, or seen
    registered before).  A bookie in ``known`` but not ``registered`` is gone since the first
    observation that saw it so; ``lost(now_s)`` are those gone for at least ``delay_s``.
    """

    def __init__(self, delay_s: float, unseen_grace_s: float = 0.0):
        self.delay_s = float(delay_s)
        # A bookie this auditor never saw registered (it was down when the auditor was elected,
        # or the whole cluster is starting) is lost only after max(delay, this): a cluster that
        # boots with lostBookieRecoveryDelay=0 does not re-replicate bookies still starting.
        self.unseen_grace_s = float(unseen_grace_s)
        self.gone_since: dict[str, float] = {}
        self.seen: set[str] = set()

    def observe(self, now_s: float, registered: set[str], known: set[str] = frozenset()) -> None:
        self.seen |= set(registered)
        for bookie in list(self.gone_since):
            if bookie in registered:
                del self.gone_since[bookie]  # back before (or after) the delay: not lost
        for bookie in (self.seen | set(known)) - set(registered):
            self.gone_since.setdefault(bookie, now_s)

    def _delay_of(self, bookie: str) -> float:
        return self.delay_s if bookie in self.seen else max(self.delay_s, self.unseen_grace_s)

    def lost(self, now_s: float) -> set[str]:
        return {b for b, t in self.gone_since.items() if now_s - t >= self._delay_of(b)}

    def next_deadline(self, now_s: float) -> float | None:
        """The earliest time a gone bookie becomes lost (None if none is waiting)."""
        pending = [t + self._delay_of(b) for b, t in self.gone_since.items()
                   if t + self._delay_of(b) > now_s]
        return min(pending) if pending else None


# -- fragments ---------------------------------------------------------------------------------

def fragment_ranges(meta: LedgerMetadata) -> list[tuple[int, int, list[str]]]:
    """``(first, last, ensemble)`` of every fragment; ``last < first`` for a fragment with no
    entries; ``UNBOUNDED`` for the last fragment of a ledger that is not closed."""
    out = []
    for i, (first, ensemble) in enumerate(meta.fragments):
        if i + 1 < len(meta.fragments):
            last = meta.fragments[i + 1][0] - 1
        elif meta.state is LedgerState.CLOSED:
            last = meta.last_entry_id
        else:
            last = UNBOUNDED
        out.append((first, last, list(ensemble)))
    return out


def _residues(first: int, last: int, ensemble_size: int) -> list[int]:
    """Residues ``e % E`` that occur among entries ``first..last``."""
    if last < first:
        return []
    if last - first + 1 >= ensemble_size:
        return list(range(ensemble_size))
    return sorted({e % ensemble_size for e in range(first, last + 1)})


def named_bookies(meta: LedgerMetadata) -> set[str]:
    return naming.named_bookies(meta.fragments)


@dataclasses.dataclass(frozen=True)
class LedgerAudit:
    """What the auditor decides for one ledger: ``missing`` lost bookies it names (mark it),
    ``lost_ranges`` fragments ``(first, last)`` with entries that have no live copy (report it,
    do not mark it)."""

    missing: tuple[str, ...] = ()
    lost_ranges: tuple[tuple[int, int], ...] = ()
    healable: bool = False  # some fragment names a lost bookie and still has live copies
    gone: bool = False  # some missing bookie is gone for good: repoint even with nothing to copy

    @property
    def mark(self) -> bool:
        """Whether to mark the ledger: a replication worker has something to copy, or a
        position to repoint away from a bookie gone for good."""
        return bool(self.missing) and (self.healable or self.gone)

    @property
    def healthy(self) -> bool:
        return not self.missing and not self.lost_ranges


def audit_ledger(meta: LedgerMetadata, lost: set[str], gone: set[str] = frozenset()
                 ) -> LedgerAudit:
    """Decide for one ledger given the set of lost bookies, ``gone`` those of them gone for
    good (module docstring)."""
    missing = sorted(named_bookies(meta) & set(lost))
    if not missing:
        return LedgerAudit()
    E, Qw = meta.ensemble_size, meta.write_quorum
    lost = set(lost)
    lost_ranges, healable = [], False
    for first, last, ensemble in fragment_ranges(meta):
        if not set(ensemble) & lost:
            continue
        if last == UNBOUNDED:  # an open tail: recovery closes it first, then it is audited again
            healable = True
            continue
        if last < first:  # no entries: repointed without a copy, nothing to cut off
            healable = True
            continue
        no_copy, holding = False, set()
        for r in _residues(first, last, E):  # per range of entries sharing one write set
            positions = write_set(r, E, Qw)
            holding.update(positions)
            members = [ensemble[p] for p in positions]
            if not lost & set(members):
                continue
            if all(m in lost for m in members):
                no_copy = True  # no copy left of these entries: reported, never marked for
            else:
                healable = True  # a live copy to copy from
        if no_copy:
            lost_ranges.append((first, last))
        if any(b in lost and p not in holding for p, b in enumerate(ensemble)):
            # a lost bookie at a position no entry of the fragment went to (fewer entries than
            # E: the writer replaced it at the first entry that did): repointed without a copy
            healable = True
    return LedgerAudit(tuple(missing), tuple(lost_ranges), healable, bool(set(missing) & set(gone)))


def needs_fence(meta: LedgerMetadata, dead: set[str]) -> bool:
    """Whether healing ``meta`` for the loss of ``dead`` must fence and recover it first: only
    an open (not closed) ledger whose *last* fragment names a dead bookie (module docstring:
    Fencing).  Earlier fragments are copied with the ledger open."""
    if meta.state is LedgerState.CLOSED or not meta.fragments:
        return False
    return bool(set(meta.fragments[-1][1]) & set(dead))


# -- replication -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Copy:
    """Copy the entries ``e`` of ``first..last`` with ``e % E == residue`` (strided read from
    ``first_entry``, ``count`` entries, stride E) from ``sources`` (the live members of their
    write set, the preferred one first)."""

    residue: int
    first_entry: int
    count: int
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class FragmentHeal:
    """Heal the bookie at ``position`` of the fragment starting at ``first``."""

    first: int
    last: int
    position: int
    bookie: str
    copies: tuple[Copy, ...]  # empty: nothing stored there (metadata only)
    unhealable: bool = False  # some entry has no live copy left


def plan_ledger(meta: LedgerMetadata, dead: set[str], rng: random.Random | None = None,
                unavailable: set[str] | None = None) -> list[FragmentHeal]:
    """Every (fragment, dead position) of a ledger to heal, in fragment order.  A closed
    ledger, or an open one whose last fragment names no dead bookie (``needs_fence``: else
    recover it first); an open ledger's last fragment is never planned.  Sources are the
    members of each write set not in ``unavailable`` (default: ``dead``; a decommissioned
    bookie that still runs is replaced but may serve its copies), shuffled to spread the
    reads."""
    if needs_fence(meta, dead):
        raise ValueError("plan_ledger: the open ledger's last fragment names a dead bookie; "
                         "recover it first")
    rng = rng or random.Random()
    unavailable = set(dead) if unavailable is None else set(unavailable)
    E, Qw = meta.ensemble_size, meta.write_quorum
    heals = []
    for first, last, ensemble in fragment_ranges(meta):
        if last == UNBOUNDED:
            continue  # an open ledger's tail: its writer's (and it names no dead bookie)
        for position, bookie in enumerate(ensemble):
            if bookie not in dead:
                continue
            copies, unhealable = [], False
            for r in _residues(first, last, E):
                members = write_set(r, E, Qw)
                if position not in members:
                    continue
                live = [ensemble[p] for p in members if ensemble[p] not in unavailable]
                if not live:
                    unhealable = True
                    continue
                start = first + (r - first) % E
                count = (last - start) // E + 1
                rng.shuffle(live)
                copies.append(Copy(r, start, count, tuple(live)))
            heals.append(FragmentHeal(first, last, position, bookie, tuple(copies), unhealable))
    return heals


def may_repoint(heal: FragmentHeal, gone: set[str]) -> bool:
    """Whether ``heal``'s position may stop naming its bookie once its copies are made
    (``naming.may_unname``): every entry there has a live copy to make, or the bookie is in
    ``gone`` (gone for good)."""
    return naming.may_unname(copied_all=not heal.unhealable, gone=heal.bookie in gone)


def choose_replacement(ensemble: list[str], writable: list[str], rng: random.Random | None = None,
                       avoid: set[str] = frozenset(), position: int | None = None,
                       write_quorum: int | None = None, placement=None) -> str | None:
    """A writable bookie that is not in ``ensemble`` (it holds no copy of the fragment) and not
    in ``avoid`` (failed before); None when there is none.  With ``placement`` (the client's
    ``client.protocol.placement.Placement``, ``ensemblePlacementPolicy``) and the ``position``
    replaced, the one the client's own ensemble change would pick: the write sets through that
    position kept as spread over racks (regions) as they can be, the lost bookie's rack
    preferred among equals; with enforcement, None when the spread falls short."""
    rng = rng or random.Random()
    candidates = sorted(set(writable) - set(ensemble) - set(avoid))
    if not candidates:
        return None
    if placement is None or position is None or write_quorum is None:
        return rng.choice(candidates)
    new = placement.replace(ensemble, [position], write_quorum, candidates, rng)
    if new is None or placement.short_of(new, write_quorum):
        return None
    return new[position]


def replace_bookie(meta: LedgerMetadata, first: int, position: int, old: str, new: str
                   ) -> LedgerMetadata:
    """A copy of ``meta`` whose fragment starting at ``first`` has ``new`` at ``position``
    instead of ``old``.  Raises ``ValueError`` if that fragment no longer has ``old`` there
    (someone else changed it: plan again) or already names ``new``."""
    fragments = [(f, list(e)) for f, e in meta.fragments]
    for i, (f, ensemble) in enumerate(fragments):
        if f == first:
            if ensemble[position] != old:
                raise ValueError(f"fragment {first} has {ensemble[position]} at {position}, "
                                 f"not {old}")
            if new in ensemble:
                raise ValueError(f"fragment {first} already names {new}")
            ensemble[position] = new
            fragments[i] = (f, ensemble)
            return dataclasses.replace(meta, fragments=fragments)
    raise ValueError(f"no fragment starts at entry {first}")


# -- marks -------------------------------------------------------------------------------------

KEEP, DROP_DELETED, DROP_BACK, DROP_HEALED = "keep", "deleted", "came back", "healed"


def settle_mark(missing: list[str], meta: LedgerMetadata | None, registered: set[str]) -> str:
    """What to do with a mark: ``KEEP`` it, or drop it for the reason returned."""
    if meta is None:
        return DROP_DELETED
    still = set(missing) & named_bookies(meta)
    if not still:
        return DROP_HEALED
    if still <= set(registered):
        return DROP_BACK
    return KEEP


# -- the periodic entry check ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Holding:
    """What ``bookie`` (at ``position`` of the fragment from ``first``) must hold: entries
    ``first_entry + k * E`` for k < ``count``; ``sources`` are the other members of their write
    set, to copy a missing one from."""

    bookie: str
    position: int
    first: int
    first_entry: int
    count: int
    sources: tuple[str, ...]


def holdings(meta: LedgerMetadata, skip: set[str] = frozenset()) -> list[Holding]:
    """Every run of entries each bookie of a closed ledger must hold (bookies in ``skip``
    left out), so a check can find entries that have fewer than Qw copies (an add confirmed by
    Qa bookies while the writer was replacing another, or a copy lost since)."""
    if meta.state is not LedgerState.CLOSED:
        return []
    E, Qw = meta.ensemble_size, meta.write_quorum
    out = []
    for first, last, ensemble in fragment_ranges(meta):
        for r in _residues(first, last, E):
            members = write_set(r, E, Qw)
            start = first + (r - first) % E
            count = (last - start) // E + 1
            for p in members:
                if ensemble[p] in skip:
                    continue
                others = tuple(ensemble[q] for q in members if q != p and ensemble[q] not in skip)
                out.append(Holding(ensemble[p], p, first, start, count, others))
    return out
