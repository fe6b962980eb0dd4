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

import os
import sys

from bookie.bench.alternated import alternate, bench_writes, figures, medians, parse


def one_run(in_flight: int, verifiable: bool, time_s: float) -> dict:
    flags = ["--localbookie", "3", "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2"]
    if verifiable:
        flags.append("--verifiable")
    return bench_writes(flags, in_flight, time_s, f"verifiable {verifiable}", timeout_s=180)


def reading(result: dict) -> dict:
    """The cost figures and the client's CPU per add, where the hashing is."""
    return {**figures(result),
            "client_cpu_us": result["phases"]["writes"]["cpu_us_per_op"].get("client", 0.0)}


def summarise(in_flight: int, on_runs: list[dict], off_runs: list[dict]) -> dict:
    runs = {"on": on_runs, "off": off_runs}
    on, off = medians(on_runs), medians(off_runs)
    return {"tool": "verifiable_cost", "in_flight": in_flight, "rounds": len(on_runs),
            "verifiable_on": on, "verifiable_off": off,
            "ratio": {k: on[k] / off[k] for k in on if off[k]},
            "spread_ops_per_s": {mode: [min(f["ops_per_s"] for f in rs),
                                        max(f["ops_per_s"] for f in rs)]
                                 for mode, rs in runs.items()},
            "load_avg": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    args = parse(argv, "python -m bookie.bench.verifiable_cost", __doc__.split("\n\n")[0],
                 "verifiable", 10.0, "256")
    summaries = alternate(args, "verifiable", lambda n, on: one_run(n, on, args.time), reading,
                          summarise)
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
