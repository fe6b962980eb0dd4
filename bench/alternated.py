"""Two ways of running ``bookie bench writes``, alternated round by round in one run, so that a
shared machine's drifting load falls on both alike: the frame of the cost benchmarks
(bench/curve_cost.py, bench/verifiable_cost.py).  Each gives the way it runs one side
(``one_run(in_flight, on) -> result``) and how it sums a window up; this module parses their
common flags, runs ``bench writes`` as a child, alternates the rounds and writes the JSON lines.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from typing import Callable

import orjson


def parse(argv: list[str], prog: str, description: str, what: str, time_s: float,
          windows: str) -> argparse.Namespace:
    """The flags both share: --rounds, --time, --in-flight, --json-out (one line per mistake)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help=f"rounds, each one run {what} and one not (default 3)")
    p.add_argument("--time", type=float, default=time_s, metavar="S",
                   help=f"seconds a run (default {time_s:g})")
    p.add_argument("--in-flight", default=windows, metavar="N[,M...]",
                   help=f"the windows to measure (default {windows})")
    p.add_argument("--json-out", metavar="FILE", help="append every JSON line to FILE too")
    args = p.parse_args(argv)
    try:
        args.windows = [int(x) for x in args.in_flight.split(",")]
    except ValueError:
        p.error(f"--in-flight {args.in_flight}: a comma-separated list of whole numbers")
    if args.rounds < 1 or args.time <= 0 or min(args.windows) < 1:
        p.error("--rounds, --time and every --in-flight must be positive")
    return args


def bench_writes(flags: list[str], in_flight: int, time_s: float, label: str,
                 env: dict | None = None, timeout_s: float = 120.0) -> dict:
    """One ``bookie bench writes`` child with ``flags``, at ``in_flight``: its last JSON line."""
    cmd = [sys.executable, "-m", "bookie", "bench", "writes", *flags, "--throttle", str(in_flight),
           "--time", str(time_s), "--quiet", "--warmup-messages", str(max(200, 20 * in_flight))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=time_s + timeout_s)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"bench writes (in flight {in_flight}, {label}) exited "
                           f"{out.returncode}: {(out.stderr or out.stdout).strip()[-400:]}")
    return orjson.loads(lines[-1])


def figures(result: dict) -> dict:
    """What a cost is read from: adds/s, p50 and p99, CPU per add of every process."""
    w = result["phases"]["writes"]
    return {"ops_per_s": w["ops_per_s"], "p50_ms": w["latency_ms"]["p50"],
            "p99_ms": w["latency_ms"]["p99"], "cpu_us": w["cpu_us_per_op"]["total"]}


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(f[k] for f in runs) for k in runs[0]}


def emitter(json_out: str | None) -> Callable[[dict], None]:
    """Print a JSON line on stdout (and append it to ``json_out`` when given)."""
    def emit(line: dict) -> None:
        text = orjson.dumps(line).decode()
        print(text, flush=True)
        if json_out:
            with open(json_out, "a") as f:
                f.write(text + "\n")
    return emit


def alternate(args: argparse.Namespace, key: str,
              one_run: Callable[[int, bool], dict], reading: Callable[[dict], dict],
              summarise: Callable[[int, list[dict], list[dict]], dict]) -> list[dict]:
    """Every window: ``args.rounds`` rounds of one run on and one off, the first of a round
    swapped each round (neither always goes first); each run's JSON line (``key``: on/off and
    the round added) and each window's summary printed (and appended to --json-out)."""

    emit = emitter(args.json_out)
    summaries = []
    for in_flight in args.windows:
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for r in range(args.rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                result = one_run(in_flight, mode == "on")
                emit({**result, key: mode, "round": r})
                runs[mode].append(reading(result))
        summary = summarise(in_flight, runs["on"], runs["off"])
        emit(summary)
        summaries.append(summary)
    return summaries
