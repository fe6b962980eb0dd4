"""Ensemble placement by rack and region (BookKeeper's ensemble placement policies), pure.

Theory of operation
-------------------
A bookie's location is ``/REGION/RACK`` (its ``bookieLocation`` key, published in its
registration); a bookie with none is at ``DEFAULT_LOCATION``.  The policy decides what a
"domain" is: ``rackaware`` spreads over racks (the whole location), ``regionaware`` over
regions (its first part), ``default`` has no domains (every bookie its own: a random choice).

Entry ``e`` goes to the ``write_quorum`` positions from ``e % E`` on (wrapping), so the write
sets of an ensemble are its E windows of ``write_quorum`` consecutive positions.  The *spread*
of an ensemble is the fewest distinct domains any of its write sets covers; the best possible
is ``min(write_quorum, domains available)``.

- ``choose`` fills the positions in order, each from a domain that the write sets through it
  do not hold yet (the previous positions, and near the end the first ones it wraps to),
  preferring domains with the most bookies left, ties and bookies by chance; it tries that
  ``TRIES`` times and keeps the ensemble of the highest spread (the first that reaches the
  best possible).  So ledgers still spread over all bookies.  When no deal reaches the best
  possible (a domain holding most of the bookies: its bookies must sit ``write_quorum - 1``
  apart, which a greedy fill from the front cannot foresee), a local search from the best deal
  swaps two positions, or a position with an unused candidate, keeping every swap that leaves
  fewer write sets at the lowest spread (``_improve``).
- ``replace`` fills each failed position with the candidate that keeps the write sets through
  that position most spread; among equals it prefers the lost bookie's own domain (a rack
  outage heals inside the rack when the other racks are taken), then chance.
- With ``enforce`` (``enforceMinNumRacksPerWriteQuorum``), an ensemble whose spread is below
  ``min_domains`` (``minNumRacksPerWriteQuorum``, capped at ``write_quorum``) is refused: the
  caller raises NotEnoughBookiesError naming the domains there are.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

from bookie.properties import check_location  # noqa: F401  (the one spelling of a location)

DEFAULT_LOCATION = "/default-region/default-rack"
POLICIES = ("default", "rackaware", "regionaware")
TRIES = 32
IMPROVE_STEPS = 400


def write_sets(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The E windows of ``write_quorum`` consecutive positions (wrapping)."""
    return [[(s + k) % ensemble_size for k in range(write_quorum)] for s in range(ensemble_size)]


class Placement:
    """The placement rule of one client.

    Args:
        policy: ``default``, ``rackaware`` or ``regionaware``.
        locations: bookie id -> ``/REGION/RACK`` (missing: DEFAULT_LOCATION); read at each call,
            so the caller may refresh it in place.
        min_domains: ``minNumRacksPerWriteQuorum``; enforce: refuse ensembles below it.
    """

    def __init__(self, policy: str = "default", locations: Mapping[str, str] | None = None,
                 min_domains: int = 2, enforce: bool = False):
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}")
        self.policy = policy
        self.locations = dict(locations or {})
        self.min_domains = min_domains
        self.enforce = enforce

    def domain(self, bookie: str) -> str:
        location = self.locations.get(bookie) or DEFAULT_LOCATION
        if self.policy == "regionaware":
            return "/" + location.split("/")[1]
        if self.policy == "rackaware":
            return location
        return bookie

    def spread(self, ensemble: Sequence[str], write_quorum: int) -> int:
        """The fewest distinct domains any write set of ``ensemble`` covers."""
        return min(len({self.domain(ensemble[p]) for p in ws})
                   for ws in write_sets(len(ensemble), write_quorum))

    def short_of(self, ensemble: Sequence[str], write_quorum: int) -> str | None:
        """With ``enforce``: why ``ensemble`` misses the minimum (naming the domains), else None."""
        if not self.enforce or self.policy == "default":
            return None
        need = min(self.min_domains, write_quorum)
        got = self.spread(ensemble, write_quorum)
        if got >= need:
            return None
        kind = "regions" if self.policy == "regionaware" else "racks"
        return (f"a write quorum of {write_quorum} spans only {got} of the {need} {kind} "
                f"required (minNumRacksPerWriteQuorum, enforced); {kind} of the writable "
                f"bookies: ")

    def choose(self, ensemble_size: int, write_quorum: int, writable: Sequence[str],
               rng: random.Random | None = None, exclude=()) -> tuple[str, ...] | None:
        """E distinct bookies from ``writable`` minus ``exclude``, spread as above; None when
        there are too few."""
        rng = rng or random.Random()
        candidates = sorted(set(writable) - set(exclude))
        if len(candidates) < ensemble_size:
            return None
        if self.policy == "default":
            return tuple(rng.sample(candidates, ensemble_size))
        by_domain: dict[str, list[str]] = {}
        for b in candidates:
            by_domain.setdefault(self.domain(b), []).append(b)
        best_possible = min(write_quorum, len(by_domain))
        best, best_spread = None, -1
        for _ in range(TRIES):
            dealt = self._deal(ensemble_size, write_quorum, by_domain, rng)
            got = self.spread(dealt, write_quorum)
            if got > best_spread:
                best, best_spread = tuple(dealt), got
            if got >= best_possible:
                break
        if best_spread < best_possible:
            best = self._improve(list(best), write_quorum, candidates, rng)
        return best

    def _score(self, ensemble: Sequence[str], write_quorum: int) -> tuple[int, int, int]:
        """Higher is better: the spread, then fewer write sets at it, then domains over all."""
        counts = [len({self.domain(ensemble[p]) for p in ws})
                  for ws in write_sets(len(ensemble), write_quorum)]
        low = min(counts)
        return low, -counts.count(low), sum(counts)

    def _improve(self, ensemble: list[str], write_quorum: int, candidates: Sequence[str],
                 rng: random.Random) -> tuple[str, ...]:
        """A bounded local search from ``ensemble``: random swaps of two positions or of a
        position with an unused candidate, each kept when the score does not drop."""
        size = len(ensemble)
        unused = [b for b in candidates if b not in set(ensemble)]
        score = self._score(ensemble, write_quorum)
        best, best_score = tuple(ensemble), score
        for _ in range(IMPROVE_STEPS):
            i = rng.randrange(size)
            if unused and rng.random() < 0.5:  # a position with an unused candidate
                other, k = unused, rng.randrange(len(unused))
            else:  # two positions
                other, k = ensemble, rng.randrange(size)
            ensemble[i], other[k] = other[k], ensemble[i]
            new_score = self._score(ensemble, write_quorum)
            if new_score >= score:
                score = new_score
            else:  # undo
                ensemble[i], other[k] = other[k], ensemble[i]
            if score > best_score:
                best, best_score = tuple(ensemble), score
        return best

    def _deal(self, ensemble_size: int, write_quorum: int, by_domain: dict[str, list[str]],
              rng: random.Random) -> list[str]:
        """One randomized greedy ensemble: position by position, a bookie of a domain none of
        the write sets through that position holds yet (the previous ``write_quorum - 1``
        positions and, near the end, the first ones it wraps to), preferring the domains with
        the most bookies left, ties broken by chance."""
        pools = {d: rng.sample(v, len(v)) for d, v in by_domain.items()}
        dealt: list[str] = []
        doms: list[str] = []
        for p in range(ensemble_size):
            near = set(doms[max(0, p - write_quorum + 1):p])
            wrap = write_quorum - 1 - (ensemble_size - 1 - p)  # first positions p wraps to
            if wrap > 0:
                near |= set(doms[:wrap])
            left = [d for d, pool in pools.items() if pool]
            allowed = [d for d in left if d not in near] or left
            rng.shuffle(allowed)
            d = max(allowed, key=lambda x: len(pools[x]))
            dealt.append(pools[d].pop())
            doms.append(d)
        return dealt

    def replace(self, ensemble: Sequence[str], failed: Sequence[int], write_quorum: int,
                writable: Sequence[str], rng: random.Random | None = None
                ) -> tuple[str, ...] | None:
        """``ensemble`` with each failed position replaced by a writable bookie not in it,
        keeping the spread (see the theory of operation); None when there are too few."""
        rng = rng or random.Random()
        new = list(ensemble)
        taken = set(ensemble)
        candidates = sorted(set(writable) - taken)
        if len(candidates) < len(failed):
            return None
        size = len(ensemble)
        for pos in sorted(failed):
            lost_domain = self.domain(ensemble[pos])
            through = [ws for ws in write_sets(size, write_quorum) if pos in ws]
            rng.shuffle(candidates)

            def score(b: str) -> tuple[int, int]:
                new[pos] = b
                worst = min(len({self.domain(new[p]) for p in ws}) for ws in through)
                return worst, int(self.domain(b) == lost_domain)
            pick = max(candidates, key=score) if self.policy != "default" else candidates[0]
            new[pos] = pick
            candidates.remove(pick)
        return tuple(new)

    def domains_of(self, bookies: Sequence[str]) -> str:
        """``domain: n bookie(s)`` for the message of an enforced refusal."""
        counts: dict[str, int] = {}
        for b in bookies:
            counts[self.domain(b)] = counts.get(self.domain(b), 0) + 1
        return ", ".join(f"{d} ({n})" for d, n in sorted(counts.items())) or "none"
