"""The pinned CURVE's cost on the whole add path: ``bookie bench writes`` against one local bookie
(E=Qw=Qa=1, 1 KiB), at 1 and at 256 in flight, with the bookie's client sockets under CURVE (the
default: the client pins the key the registration publishes) and in the clear (the baseline:
``BOOKIE_BENCH_PLAINTEXT=1`` in the bookie's environment, workers/auth.py), the two alternated
round by round in one run, so a shared machine's drifting load falls on both alike.

    python -m bookie.bench.curve_cost [--rounds N] [--time S] [--in-flight 1,256] [--json-out F]

Prints each ``bench writes`` JSON line (with ``"curve": "on"|"off"`` and the round added), then
one summary line per window: throughput, p50 and CPU per add, each CURVE over plain, from the
medians of the rounds (a ratio of 1.00 is no cost; the issue's target is within 5 %).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import orjson

from bookie.workers.auth import PLAINTEXT_ENV


def one_run(in_flight: int, curve: bool, time_s: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLAINTEXT_ENV}
    if not curve:
        env[PLAINTEXT_ENV] = "1"
    cmd = [sys.executable, "-m", "bookie", "bench", "writes", "--localbookie", "1",
           "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1", "--throttle", str(in_flight),
           "--time", str(time_s), "--quiet", "--warmup-messages", str(max(200, 20 * in_flight))]
    if not curve:  # the bookie's registration then publishes no key: the client must allow it
        cmd += ["--set", "allowClearTextBookies=true"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=time_s + 120)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"bench writes (in flight {in_flight}, curve {curve}) exited "
                           f"{out.returncode}: {(out.stderr or out.stdout).strip()[-400:]}")
    return orjson.loads(lines[-1])


def figures(result: dict) -> dict:
    w = result["phases"]["writes"]
    return {"ops_per_s": w["ops_per_s"], "p50_ms": w["latency_ms"]["p50"],
            "p99_ms": w["latency_ms"]["p99"], "cpu_us": w["cpu_us_per_op"]["total"]}


def summarise(in_flight: int, on: list[dict], off: list[dict]) -> dict:
    med = {mode: {k: statistics.median(f[k] for f in runs) for k in runs[0]}
           for mode, runs in (("on", on), ("off", off))}
    return {"tool": "curve_cost", "in_flight": in_flight, "rounds": len(on),
            "curve_on": med["on"], "curve_off": med["off"],
            "ratio": {"ops_per_s": med["on"]["ops_per_s"] / med["off"]["ops_per_s"],
                      "p50_ms": med["on"]["p50_ms"] / med["off"]["p50_ms"],
                      "cpu_us": med["on"]["cpu_us"] / med["off"]["cpu_us"]},
            "load_avg": os.getloadavg()[0]}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bookie.bench.curve_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="rounds, each one run with CURVE and one without (default 3)")
    p.add_argument("--time", type=float, default=5.0, metavar="S", help="seconds a run (default 5)")
    p.add_argument("--in-flight", default="1,256", metavar="N[,M...]",
                   help="the windows to measure (default 1,256)")
    p.add_argument("--json-out", metavar="FILE", help="append every JSON line to FILE too")
    args = p.parse_args(argv)
    try:
        args.windows = [int(x) for x in args.in_flight.split(",")]
    except ValueError:
        p.error(f"--in-flight {args.in_flight}: a comma-separated list of whole numbers")
    if args.rounds < 1 or args.time <= 0 or min(args.windows) < 1:
        p.error("--rounds, --time and every --in-flight must be positive")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)

    def emit(line: dict) -> None:
        text = orjson.dumps(line).decode()
        print(text, flush=True)
        if args.json_out:
            with open(args.json_out, "a") as f:
                f.write(text + "\n")

    summaries = []
    for in_flight in args.windows:
        runs: dict[str, list[dict]] = {"on": [], "off": []}
        for r in range(args.rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")  # neither always goes first
            for mode in order:
                result = one_run(in_flight, mode == "on", args.time)
                emit({**result, "curve": mode, "round": r})
                runs[mode].append(figures(result))
        summary = summarise(in_flight, runs["on"], runs["off"])
        emit(summary)
        summaries.append(summary)
    for s in summaries:
        on, off, ratio = s["curve_on"], s["curve_off"], s["ratio"]
        print(f"{s['in_flight']:>4} in flight, {s['rounds']} rounds: adds/s {on['ops_per_s']:,.0f} "
              f"CURVE / {off['ops_per_s']:,.0f} plain = {ratio['ops_per_s']:.3f}; p50 "
              f"{on['p50_ms']:.3f} / {off['p50_ms']:.3f} ms = {ratio['p50_ms']:.3f}; CPU per add "
              f"{on['cpu_us']:.1f} / {off['cpu_us']:.1f} us = {ratio['cpu_us']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
