"""Per-replica durability: the rules, apart from reading (``quiescent.py`` reads).

At a quiescent point the runner reads every acknowledged entry it checks straight from each
bookie of the entry's write set (the ledger's metadata as it is then: after an ensemble change
or a re-replication, the bookies that now hold that position) and hands what each answered to
``judge_ledger``:

==================  ===========================================================================
``replica_differs``  a bookie of the write set holds other bytes at that entry id than the
                     acknowledged add (a digest that fails counts: the bytes are not the add's)
``under_replicated`` fewer than Qa bookies of the write set hold the acknowledged bytes
``below_qw``         (only when ``require_qw``: healing has had its time) fewer than Qw hold them
==================  ===========================================================================

A copy is one of: the payload bytes (digest checked), ``MISSING`` (the bookie answered that it
has no such entry or ledger), ``CORRUPT`` (bytes whose digest fails), ``UNREACHABLE`` (no answer:
counts as not holding it, named so in the violation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MISSING = "missing"
CORRUPT = "corrupt"
UNREACHABLE = "unreachable"


@dataclass
class ReplicaReport:
    """What a per-replica check found: ``replica_checks`` copies compared, ``entries`` checked,
    ``below_qw`` entries with fewer than Qw good copies (a figure, or a violation when
    healing was required), ``violations`` as ``(kind, where, detail)``."""
    entries: int = 0
    replica_checks: int = 0
    below_qw: int = 0
    violations: list[tuple[str, str, str]] = field(default_factory=list)

    def merge(self, other: "ReplicaReport") -> None:
        self.entries += other.entries
        self.replica_checks += other.replica_checks
        self.below_qw += other.below_qw
        self.violations += other.violations


def write_set_ids(fragments: list[tuple[int, list[str]]], entry_id: int, ensemble_size: int,
                  write_quorum: int) -> list[str]:
    """The bookie ids that must store ``entry_id`` under these fragments (round-robin from
    ``entry_id % E`` in the fragment that holds the entry)."""
    ensemble = fragments[0][1]
    for first, bookies in fragments:
        if first > entry_id:
            break
        ensemble = bookies
    return [ensemble[(entry_id + k) % ensemble_size] for k in range(write_quorum)]


def judge_ledger(ledger_id: int, expected: dict[int, bytes],
                 copies: dict[int, dict[str, object]], qa: int, qw: int,
                 require_qw: bool) -> ReplicaReport:
    """Judge one ledger: ``expected`` entry_id -> the acknowledged payload; ``copies`` entry_id
    -> {bookie id of its write set -> payload bytes or MISSING / CORRUPT / UNREACHABLE}."""
    report = ReplicaReport()
    short: list[tuple[int, str]] = []
    differs: list[tuple[int, str]] = []
    unhealed: list[int] = []
    for entry_id, want in sorted(expected.items()):
        answers = copies.get(entry_id, {})
        report.entries += 1
        report.replica_checks += len(answers)
        good = 0
        for bookie, got in sorted(answers.items()):
            if got == want:
                good += 1
            elif isinstance(got, bytes) or got == CORRUPT:
                differs.append((entry_id, f"{bookie}: " + (
                    "digest fails" if got == CORRUPT else f"{bytes(got[:40])!r}")))
        if good < qa:
            short.append((entry_id, ", ".join(f"{b}={_show(g, want)}"
                                              for b, g in sorted(answers.items()))))
        elif good < qw:
            report.below_qw += 1
            unhealed.append(entry_id)
    where = f"ledger {ledger_id}"
    if differs:
        report.violations.append((
            "replica_differs", where, f"{len(differs)} copies of acknowledged entries hold other "
            f"bytes; first: entry {differs[0][0]} on {differs[0][1]}"))
    if short:
        report.violations.append((
            "under_replicated", where, f"{len(short)} acknowledged entries on fewer than Qa={qa} "
            f"bookies of their write set (first {[e for e, _ in short[:8]]}; entry "
            f"{short[0][0]}: {short[0][1]})"))
    if require_qw and unhealed:
        report.violations.append((
            "below_qw", where,
            f"{len(unhealed)} acknowledged entries on fewer than Qw={qw} bookies of their "
            f"write set after healing had its time (first {unhealed[:8]})"))
    return report


def _show(got: object, want: bytes) -> str:
    if got == want:
        return "ok"
    return got if isinstance(got, str) else "other bytes"
