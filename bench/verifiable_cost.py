"""What verifiable ledgers (issue 43) cost on the add path: ``bookie bench writes`` on three
local bookies (E=3, Qw=Qa=2, 1 KiB entries) with ``--verifiable`` and without, alternated round
by round in one run (so a shared machine's drifting load falls on both alike), at the windows
asked for (default 256 in flight).

    python -m bookie.bench.verifiable_cost [--rounds N] [--time S] [--in-flight 256] [--json-out F]

Prints each run's JSON line (``"verifiable": "on"|"off"`` and the round added), one summary line
per window (medians of the rounds, verifiable over plain: adds/s, p50, CPU per add in total and
in the client, where the hashing is) and the spread of each mode's rounds.  The issue's target:
adds/s within 10 % at 256 in flight.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import orjson

from bookie.bench.curve_cost import figures


def one_run(in_flight: int, verifiable: bool, time_s: float) -> dict:
    cmd = [sys.executable, "-m", "bookie", "bench", "writes", "--localbookie", "3",
           "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2", "--throttle", str(in_flight),
           "--time", str(time_s), "--quiet", "--warmup-messages", str(max(200, 20 * in_flight))]
    if verifiable:
        cmd.append("--verifiable")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=time_s + 180)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"bench writes (in flight {in_flight}, verifiable {verifiable}) exited "
                           f"{out.returncode}: {(out.stderr or out.stdout).strip()[-400:]}")
    return orjson.loads(lines[-1])


def summarise(in_flight: int, runs: dict[str, list[dict]]) -> dict:
    med = {mode: {k: statistics.median(f[k] for f in rs) for k in rs[0]}
           for mode, rs in runs.items()}
    on, off = med["on"], med["off"]
    return {"tool": "verifiable_cost", "in_flight": in_flight, "rounds": len(runs["on"]),
            "verifiable_on": on, "verifiable_off": off,
            "ratio": {k: on[k] / off[k] for k in on if off[k]},
            "spread_ops_per_s": {mode: [min(f["ops_per_s"] for f in rs),
                                        max(f["ops_per_s"] for f in rs)]
                                 for mode, rs in runs.items()},
            "load_avg": os.getloadavg()[0]}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bookie.bench.verifiable_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="rounds, each one run verifiable and one not (default 3)")
    p.add_argument("--time", type=float, default=10.0, metavar="S",
                   help="seconds a run (default 10)")
    p.add_argument("--in-flight", default="256", metavar="N[,M...]",
                   help="the windows to measure (default 256)")
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
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                result = one_run(in_flight, mode == "on", args.time)
                f = figures(result)
                f["client_cpu_us"] = result["phases"]["writes"]["cpu_us_per_op"].get("client", 0.0)
                emit({**result, "verifiable": mode, "round": r})
                runs[mode].append(f)
        summary = summarise(in_flight, runs)
        emit(summary)
        summaries.append(summary)
    for s in summaries:
        on, off, ratio = s["verifiable_on"], s["verifiable_off"], s["ratio"]
        print(f"{s['in_flight']:>4} in flight, {s['rounds']} rounds: adds/s {on['ops_per_s']:,.0f} "
              f"verifiable / {off['ops_per_s']:,.0f} plain = {ratio['ops_per_s']:.3f} (spread "
              f"{s['spread_ops_per_s']}); p50 {on['p50_ms']:.3f} / {off['p50_ms']:.3f} ms; CPU "
              f"per add {on['cpu_us']:.1f} / {off['cpu_us']:.1f} us, client "
              f"{on['client_cpu_us']:.1f} / {off['client_cpu_us']:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
