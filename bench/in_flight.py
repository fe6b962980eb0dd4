"""Pictures of ``bookie bench report``: throughput and latency against the adds in flight, the
peers (Redis with ``appendfsync always``, a 3-server ZooKeeper) beside the bookie.

The points come from a results file (the JSON lines the report appends: ``writes`` runs at each
``--throttle`` without ``--rate``, and the peers' runs), or, with no file at hand, from the
results tables a report wrote into bench/README.md (between its ``results`` markers), so the
pictures of the README are drawn from the figures it shows and nothing is measured again.
A figure a run did not measure (the throughput of one add at a time is not in the table) is
left out, never estimated.
"""

from __future__ import annotations

import dataclasses
import os
import re

from bookie.bench.plot import require_matplotlib

THROUGHPUT_PNG = "in-flight-throughput.png"
LATENCY_PNG = "in-flight-latency.png"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"

# The standard runs of the detailed table, by name: (series, adds in flight).
README_RUNS = {
    "client, 1 bookie, E=Qw=Qa=1, one add at a time": ("bookie, 1 bookie E=Qw=Qa=1", 1),
    "client, 1 bookie, E=Qw=Qa=1, 256 in flight": ("bookie, 1 bookie E=Qw=Qa=1", 256),
    "client, 1 bookie, E=Qw=Qa=1": ("bookie, 1 bookie E=Qw=Qa=1", 10000),
    "client, 3 bookies, E=3 Qw=2 Qa=2, 256 in flight": ("bookie, 3 bookies E=3 Qw=2 Qa=2", 256),
    "client, 3 bookies, E=3 Qw=2 Qa=2": ("bookie, 3 bookies E=3 Qw=2 Qa=2", 10000),
}
REDIS = "Redis XADD, appendfsync always"
ZOOKEEPER = "ZooKeeper x3, forceSync"


@dataclasses.dataclass
class Point:
    series: str
    in_flight: int
    ops_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None


def points_from_results(results: list[dict]) -> list[Point]:
    """The last result of each (series, in flight) in a results file."""
    found: dict[tuple[str, int], Point] = {}
    for r in results:
        params, phases = r.get("params", {}), r.get("phases", {})
        if r.get("tool") == "writes" and params.get("rate") is None and "writes" in phases:
            e = params.get("ensemble")
            series = ("bookie, 1 bookie E=Qw=Qa=1" if e == 1 else
                      f"bookie, {e} bookies E={e} Qw={params.get('write_quorum')} "
                      f"Qa={params.get('ack_quorum')}")
            ph, n = phases["writes"], params.get("throttle")
        elif r.get("tool") == "peer" and not r.get("error") and "adds" in phases:
            series = REDIS if params.get("system") == "redis" else ZOOKEEPER
            ph, n = phases["adds"], params.get("in_flight") or 256
        else:
            continue
        if not n:
            continue
        lat = ph.get("latency_ms") or {}
        found[(series, int(n))] = Point(series, int(n), ph.get("ops_per_s") or None,
                                        lat.get("p50") or None, lat.get("p99") or None)
    return sorted(found.values(), key=lambda p: (p.series, p.in_flight))


def _number(text: str) -> float:
    """``94,766/s``, ``124.4k/s``, ``9.92 ms`` -> a float (k: thousands)."""
    m = re.search(r"([\d,]+(?:\.\d+)?)\s*(k?)", text)
    value = float(m.group(1).replace(",", ""))
    return value * 1000 if m.group(2) else value


def points_from_readme(text: str) -> list[Point]:
    """The points of the results tables a report wrote between the README's markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no results table between {BEGIN} and {END}")
    table = text[text.index(BEGIN):text.index(END)]
    points: dict[tuple[str, int], Point] = {}
    run = None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3:
            continue
        if cells[0]:
            run = README_RUNS.get(cells[0])
        if run is not None and len(cells) >= 6:  # the detailed table: run, figure, measured
            p = points.setdefault(run, Point(run[0], run[1]))
            figure, measured = cells[1], cells[2]
            if figure in ("adds/s",):
                p.ops_per_s = _number(measured)
            elif figure == "p99":
                p.p99_ms = _number(measured)
            elif figure == "p50":
                p.p50_ms = _number(measured)
        peer = cells[2] if len(cells) >= 3 else ""
        m = re.search(r"Redis XADD, AOF `appendfsync always`, 16 clients x 16 pipelined: "
                      r"([\d.,]+k?/s), p99 ([\d.]+) ms", peer)
        if m:
            points[(REDIS, 256)] = Point(REDIS, 256, _number(m.group(1)), None,
                                         float(m.group(2)))
        m = re.search(r"Redis XADD at QD1, AOF `appendfsync always`: ([\d.]+) ms p50", peer)
        if m:
            points[(REDIS, 1)] = Point(REDIS, 1, None, float(m.group(1)), None)
        m = re.search(r"ZooKeeper x3, Java client, 256 in flight: ([\d.,]+k?/s)", peer)
        if m:
            points[(ZOOKEEPER, 256)] = Point(ZOOKEEPER, 256, _number(m.group(1)))
    return sorted(points.values(), key=lambda p: (p.series, p.in_flight))


# Neighbouring measurements further apart than this (a decade of adds in flight) are drawn as
# points only: a line between 256 and 10,000 in flight would show values never measured.
MAX_JOINED_RATIO = 10.0


def joined_runs(pts: list[tuple[float, float]],
                max_ratio: float = MAX_JOINED_RATIO) -> list[list[tuple[float, float]]]:
    """``pts`` (ascending x) cut into runs whose neighbours are at most ``max_ratio`` apart: a
    run of one is a lone point, a longer run a line through measured points."""
    runs: list[list[tuple[float, float]]] = []
    for x, y in pts:
        if runs and x <= runs[-1][-1][0] * max_ratio:
            runs[-1].append((x, y))
        else:
            runs.append([(x, y)])
    return runs


def plot_in_flight(points: list[Point], out_dir: str, caption: str = "") -> list[str]:
    """Write ``THROUGHPUT_PNG`` (adds/s against adds in flight) and ``LATENCY_PNG`` (p50 and
    p99 against adds in flight) into ``out_dir``; the bookie's series as points, joined only
    between neighbours at most a decade apart (``joined_runs``), the peers as markers.  Returns the paths.  Raises PlotUnavailable without matplotlib."""
    plt = require_matplotlib()
    os.makedirs(out_dir, exist_ok=True)
    series = sorted({p.series for p in points}, key=lambda s: (not s.startswith("bookie"), s))
    styles = {s: ("-o" if s.startswith("bookie") else "s") for s in series}
    colours = {s: f"C{i}" for i, s in enumerate(series)}  # one colour per system, both pictures
    paths = []
    for name, field_sets, ylabel, title in (
            (THROUGHPUT_PNG, (("ops_per_s", ""),), "adds per second",
             "Throughput against adds in flight"),
            (LATENCY_PNG, (("p99_ms", "p99"), ("p50_ms", "p50")), "latency (ms)",
             "Add latency against adds in flight")):
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for s in series:
            for field, label in field_sets:
                pts = [(p.in_flight, getattr(p, field)) for p in points
                       if p.series == s and getattr(p, field)]
                if not pts:
                    continue
                style = styles[s] if field != "p50_ms" else styles[s].replace("-", "--")
                for i, run in enumerate(joined_runs(sorted(pts))):
                    xs, ys = zip(*run)
                    ax.plot(xs, ys, style, label=f"{s} {label}".strip() if i == 0 else None,
                            markersize=7, color=colours[s],
                            fillstyle="full" if field != "p50_ms" else "none")
                for x, y in pts:
                    ax.annotate(f"{y / 1000:,.0f}k" if field == "ops_per_s" else f"{y:.2f}",
                                (x, y), textcoords="offset points", xytext=(4, 4),
                                fontsize="x-small")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("adds in flight (1 KiB entries, fdatasync before the ack)")
        ax.set_ylabel(ylabel)
        ax.set_title(title + (f"\n{caption}" if caption else ""), fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
