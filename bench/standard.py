"""``bookie bench report``: the standard set of runs, and the results table of bench/README.md.

Each standard run is a command line of one tool plus the figures it is judged on, each with
its target from the benchmarking issue.  ``run_all`` runs them (appending every JSON line to a
results file); ``render`` turns results into the Markdown table, taking for each standard run
the latest result whose tool and parameters match it, so a table can be rebuilt from a results
file without running anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import sys
from typing import Callable

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


@dataclasses.dataclass(frozen=True)
class Figure:
    label: str
    get: Callable[[dict], float]
    target: float | None  # None: shown, not judged
    at_least: bool  # True: the figure must reach the target; False: stay under it
    unit: str
    beside: str | None = None  # name of another standard run: ``get(result, its latest result)``


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    tool: str
    argv: tuple[str, ...]  # after "bookie bench TOOL", without --time and output options
    match: dict  # params a result must have to be this run's
    figures: tuple[Figure, ...]
    local: bool = True  # starts its own bookies (--data-dir applies)
    # (name of an earlier standard run, fraction): run at ``--rate`` = fraction x that run's
    # writer adds/s (the tailing reader at half the full-speed rate)
    rate_of: tuple[str, float] | None = None


class Given:
    """A ``Run.match`` value: the parameter is set (not None), whatever its value."""

    def __eq__(self, other) -> bool:
        return other is not None

    def __repr__(self) -> str:
        return "Given()"


def _phase(name: str, *path: str):
    def get(result: dict) -> float:
        value = result["phases"][name]
        for key in path:
            value = value[key]
        return value
    return get


def _ratio(a, b):
    def get(result: dict) -> float:
        return a(result) / b(result)
    return get


def _over_other(a, b):
    """a of this run's result / b of the run ``Figure.beside`` names."""
    def get(result: dict, other: dict) -> float:
        return a(result) / b(other)
    return get


def _of_other(b):
    def get(result: dict, other: dict) -> float:
        return b(other)
    return get


RAW = "one bookie, raw wire (BenchBookie)"
READS_E1 = "reads of a closed ledger, 1 bookie"
TAIL_FULL = "tailing reads of a full-speed writer, 1 bookie"
_DISK_P50 = _phase("disk", "latency_ms", "p50")
_SEQ = _phase("sequential", "ops_per_s")


STANDARD: tuple[Run, ...] = (
    Run(RAW, "bookie",
        ("--localbookie", "--sync-time", "2"), {"rate": None},
        (Figure("pipelined adds/s", _phase("pipelined", "ops_per_s"), 100_000, True, "/s"),
         Figure("pipelined p99", _phase("pipelined", "latency_ms", "p99"), None, False, "ms"),
         Figure("disk 4 KiB write+fdatasync p50", _phase("disk", "latency_ms", "p50"), None, False, "ms"),
         Figure("lone add p50", _phase("sync", "latency_ms", "p50"), None, False, "ms"),
         Figure("lone add p50 / disk p50", _ratio(_phase("sync", "latency_ms", "p50"),
                                                  _phase("disk", "latency_ms", "p50")), 3.0, False, ""),
         Figure("lone add p99", _phase("sync", "latency_ms", "p99"), 1.5, False, "ms"))),
    Run("client, 1 bookie, E=Qw=Qa=1, one add at a time", "writes",
        ("--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1",
         "--throttle", "1"),
        {"ensemble": 1, "rate": None, "throttle": 1},
        (Figure("p50", _phase("writes", "latency_ms", "p50"), None, False, "ms"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), 1.5, False, "ms"),
         Figure("disk 4 KiB write+fdatasync p50 (raw wire run)", _of_other(_DISK_P50), None,
                False, "ms", beside=RAW),
         Figure("p50 / disk p50", _over_other(_phase("writes", "latency_ms", "p50"), _DISK_P50),
                None, False, "", beside=RAW))),
    Run("client, 1 bookie, E=Qw=Qa=1, 256 in flight", "writes",
        ("--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1",
         "--throttle", "256"),
        {"ensemble": 1, "rate": None, "throttle": 256},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 130_000, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), 5.0, False, "ms"))),
    Run("client, 3 bookies, E=3 Qw=2 Qa=2, 256 in flight", "writes",
        ("--localbookie", "3", "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2",
         "--throttle", "256"),
        {"ensemble": 3, "rate": None, "throttle": 256},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 60_000, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), 10.0, False, "ms"))),
    Run("client, 1 bookie, E=Qw=Qa=1", "writes",
        ("--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1"),
        {"ensemble": 1, "rate": None, "throttle": 10000},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 100_000, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), None, False, "ms"))),
    Run("client, 1 bookie, E=Qw=Qa=1, --rate 50000", "writes",
        ("--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1",
         "--rate", "50000"),
        {"ensemble": 1, "rate": 50000.0},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 50_000 * 0.99, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), 10.0, False, "ms"))),
    Run("client, 3 bookies, E=3 Qw=2 Qa=2", "writes",
        ("--localbookie", "3", "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2"),
        {"ensemble": 3, "rate": None, "throttle": 10000},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 40_000, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), None, False, "ms"))),
    Run("client, 3 bookies, E=3 Qw=2 Qa=2, --rate 20000", "writes",
        ("--localbookie", "3", "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2",
         "--rate", "20000"),
        {"ensemble": 3, "rate": 20000.0},
        (Figure("adds/s", _phase("writes", "ops_per_s"), 20_000 * 0.99, True, "/s"),
         Figure("p99", _phase("writes", "latency_ms", "p99"), 20.0, False, "ms"))),
    Run(READS_E1, "reads",
        ("--localbookie", "1", "--entries", "200000"), {"listen": None, "ensemble": 1},
        (Figure("entries/s", _phase("sequential", "ops_per_s"), 150_000, True, "/s"),
         Figure("p99 per read", _phase("sequential", "latency_ms", "p99"), None, False, "ms"))),
    Run("reads of a closed ledger, 3 bookies, E=3 Qw=2 (striped READ)", "reads",
        ("--localbookie", "3", "--ensemble", "3", "--quorum", "2", "--entries", "200000",
         "--lose-replica-at", "50000"),
        {"listen": None, "ensemble": 3, "quorum": 2},
        (Figure("entries/s", _SEQ, 250_000, True, "/s"),
         Figure("p99 per read", _phase("sequential", "latency_ms", "p99"), None, False, "ms"),
         Figure("that / E=1 entries/s", _over_other(_SEQ, _SEQ), 0.9, True, "", beside=READS_E1),
         Figure("entries/s, a replica SIGSTOPped after 50,000",
                _phase("lost_replica", "ops_per_s"), None, True, "/s"),
         Figure("that / healthy", lambda r: r["figures"]["lost_replica_ratio"], 0.5, True, ""))),
    Run("reads of a closed ledger, 3 bookies, E=3 Qw=3 (striped READ)", "reads",
        ("--localbookie", "3", "--ensemble", "3", "--quorum", "3", "--entries", "200000"),
        {"listen": None, "ensemble": 3, "quorum": 3},
        (Figure("entries/s", _SEQ, 250_000, True, "/s"),
         Figure("p99 per read", _phase("sequential", "latency_ms", "p99"), None, False, "ms"),
         Figure("that / E=1 entries/s", _over_other(_SEQ, _SEQ), 0.9, True, "", beside=READS_E1))),
    Run(TAIL_FULL, "reads",
        ("--localbookie", "1", "--listen", "1"), {"listen": 1, "rate": None},
        (Figure("writer adds/s", _phase("writer", "ops_per_s"), None, True, "/s"),
         Figure("tail lag p50", _phase("tail", "lag_ms", "p50"), None, False, "ms"),
         Figure("tail lag p99", _phase("tail", "lag_ms", "p99"), 50.0, False, "ms"))),
    Run("tailing reads, writer at half the full-speed rate, 1 bookie", "reads",
        ("--localbookie", "1", "--listen", "1"), {"listen": 1, "rate": Given()},
        (Figure("writer adds/s", _phase("writer", "ops_per_s"), None, True, "/s"),
         Figure("tail lag p50", _phase("tail", "lag_ms", "p50"), None, False, "ms"),
         Figure("tail lag p99", _phase("tail", "lag_ms", "p99"), 20.0, False, "ms")),
        rate_of=(TAIL_FULL, 0.5)),
    Run("journal alone vs raw fdatasync", "journal", (), {"rate": None},
        (Figure("journal MB/s", _phase("journal", "disk_mb_per_s"), None, True, "MB/s"),
         Figure("raw MB/s", _phase("raw", "disk_mb_per_s"), None, True, "MB/s"),
         Figure("ratio", lambda r: r["figures"]["ratio"], 0.8, True, "")),
        local=False),
)


def matches(run: Run, result: dict) -> bool:
    if result.get("tool") != run.tool:
        return False
    params = result.get("params", {})
    return all(params.get(k) == v for k, v in run.match.items())


def latest(run: Run, results: list[dict]) -> dict | None:
    found = [r for r in results if matches(run, r)]
    return found[-1] if found else None


def _fmt(value: float, unit: str) -> str:
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "MB/s":
        return f"{value:.1f} MB/s"
    return f"{value:.2f}"


def verdict(fig: Figure, value: float) -> str:
    """"met", or how far off the target is, in percent of the target."""
    if fig.target is None:
        return ""
    if (value >= fig.target) if fig.at_least else (value <= fig.target):
        return "met"
    if fig.at_least:
        return f"missed: {100 * (1 - value / fig.target):.0f}% short"
    return f"missed: {100 * (value / fig.target - 1):.0f}% over"


def _row(*cells) -> str:
    return "|" + "|".join(f" {c} " if c != "" else " " for c in cells) + "|"


def by_name(name: str) -> Run:
    return next(r for r in STANDARD if r.name == name)


def cpu_cell(result: dict) -> str:
    """A result's CPU microseconds per operation: the total, then each process role's share
    (``cpu_us_per_op``, bench/cpu.py); "" for a result from before the figure existed."""
    figure = result.get("cpu_us_per_op") or {}
    if not figure:
        return ""
    roles = ", ".join(f"{role} {us:.1f}" for role, us in figure.items()
                      if role != "total" and us >= 0.05)
    return f"{figure['total']:.1f}" + (f" ({roles})" if roles else "")


def render(results: list[dict]) -> str:
    """The Markdown results table (with the date, host and versions it was measured on)."""
    rows = [_row("run", "figure", "measured", "target", "verdict", "load (1 min)",
                 "CPU us per op (by process)"),
            _row(*["---"] * 7)]
    used = []
    for run in STANDARD:
        result = latest(run, results)
        if result is None:
            rows.append(_row(run.name, "", "not run", "", "", "", ""))
            continue
        used.append(result)
        load = f"{result['host']['load_avg'][0]:.2f}"
        for i, fig in enumerate(run.figures):
            name = run.name if i == 0 else ""
            try:
                if fig.beside is None:
                    value = fig.get(result)
                else:
                    other = latest(by_name(fig.beside), results)
                    if other is None:
                        rows.append(_row(name, fig.label, f"no result of \"{fig.beside}\"",
                                         "", "", "", ""))
                        continue
                    value = fig.get(result, other)
            except (KeyError, TypeError, ZeroDivisionError):
                rows.append(_row(name, fig.label, "absent", "", "", "", ""))
                continue
            target = "" if fig.target is None else \
                ((">= " if fig.at_least else "< ") + _fmt(fig.target, fig.unit))
            rows.append(_row(name, fig.label, _fmt(value, fig.unit), target, verdict(fig, value),
                             load if i == 0 else "", cpu_cell(result) if i == 0 else ""))
    head = []
    if used:
        first = used[0]
        host, v = first["host"], first["host"]["versions"]
        dates = sorted(r["date"] for r in used)
        secs = sorted({r["params"].get("time") for r in used if r["params"].get("time")})
        head.append(f"Measured {dates[0]} .. {dates[-1]} on {host['cores']} cores "
                    f"({host.get('cpu_model') or 'unknown CPU'}), "
                    f"{(host.get('memory_bytes') or 0) / 2**30:.0f} GiB, kernel {host['kernel']}"
                    + (f", disk {host['disk']['fstype']} on {host['disk']['device']}"
                       if host.get("disk") else "") + ".")
        head.append(f"bookie {v['bookie']}, Python {v['python']}, pyzmq {v['pyzmq']} "
                    f"(libzmq {v['libzmq']}), numpy {v['numpy']}, lmdb {v['lmdb']}; "
                    f"{', '.join(f'{s:g}' for s in secs)} s per measured phase.")
        head.append("")
    return "\n".join(head + rows) + "\n"


def replace_in_readme(path: str, table: str) -> None:
    """Put ``table`` between the results markers of ``path``.

    Raises:
        ValueError: the markers are missing.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no {BEGIN} ... {END} markers")
    text = text[:start + len(BEGIN)] + "\n" + table + text[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run_all(results_path: str, time_s: float, data_dir: str, quiet: bool,
            runs: tuple[Run, ...] = STANDARD, *, bench_main) -> list[tuple[str, int]]:
    """Run each standard run, appending its JSON line to ``results_path``.

    Returns:
        (run name, exit status) of each; a failed run is reported, the others still run.
    """
    from bookie.bench.report import load_results  # lazy: zmq
    main = bench_main  # ``bookie bench``'s own main (cli.main): it calls this module
    statuses = []
    for i, run in enumerate(runs):
        argv = [run.tool, *run.argv, "--time", f"{time_s:g}", "--json-out", results_path]
        if run.rate_of is not None:
            base, fraction = run.rate_of
            done = load_results(results_path) if os.path.exists(results_path) else []
            other = latest(by_name(base), done)
            if other is None:
                print(f"== {run.name}: skipped, it runs at a rate measured by \"{base}\", "
                      f"which has no result", file=sys.stderr, flush=True)
                statuses.append((run.name, 1))
                continue
            rate = max(1.0, round(fraction * other["phases"]["writer"]["ops_per_s"]))
            argv += ["--rate", f"{rate:g}"]
        if quiet:
            argv.append("--quiet")
        if run.tool == "journal":
            argv += ["--dir", data_dir]
        elif run.local:
            argv += ["--data-dir", os.path.join(data_dir, f"run-{i}")]
        settle()
        print(f"== {run.name}: bookie bench {' '.join(argv)}", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(io.StringIO()):  # the JSON line goes to the file
            rc = main(argv)
        statuses.append((run.name, rc))
        if run.local:  # the next run's disk is not busy writing back or deleting this one's
            shutil.rmtree(os.path.join(data_dir, f"run-{i}"), ignore_errors=True)
    return statuses


def settle() -> None:
    """Write back every dirty page before a run: a run that follows another (1 GB of entry logs
    and journal at full speed) otherwise shares the disk with the kernel's write-back of the
    last run's files, and measures that too."""
    os.sync()
