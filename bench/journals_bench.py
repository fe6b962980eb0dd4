"""``bench writes --journals 1,2``: the same write load against local bookies with one, then
two (or more) journals on the same disk, in one run, and the throughput ratio.

Each count gets fresh bookies in a directory of its own (a bookie's journal count is part of its
layout: storage/journal_set.py), one after the other, on the disk of ``--data-dir`` (or of the
temporary directory).  The result is one ``writes`` result whose phases are ``journals-N``, with
``journals_ratio``: adds/s with the last count over adds/s with the first (docs/architecture.md,
"Several journals", says what to expect from it).
"""

from __future__ import annotations

from bookie.bench.report import headline_cpu


def parse_journals(text: str) -> list[int]:
    """``"1,2"`` -> [1, 2].  Raises ValueError naming what is wrong."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected journal counts separated by commas (1,2), got {text!r}") from None
    if not counts or any(n < 1 or n > 16 for n in counts):
        raise ValueError(f"each journal count must be 1 to 16, got {text!r}")
    if len(set(counts)) != len(counts):
        raise ValueError(f"a journal count is named twice in {text!r}")
    return counts


def combine(results: dict[int, dict]) -> dict:
    """One result from the ``writes`` result of each journal count (in the order run)."""
    counts = list(results)
    first = results[counts[0]]
    phases = {f"journals-{n}": r["phases"]["writes"] for n, r in results.items()}
    base = phases[f"journals-{counts[0]}"]["ops_per_s"]
    last = phases[f"journals-{counts[-1]}"]["ops_per_s"]
    figures = dict(first["figures"])
    figures["journals_ratio"] = last / base if base else 0.0
    figures["journals_compared"] = f"{counts[-1]} vs {counts[0]}"
    return {**first, "phases": phases, "figures": figures, "cpu_us_per_op": headline_cpu(phases)}
