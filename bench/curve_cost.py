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

import os
import sys

from bookie.bench.alternated import alternate, bench_writes, figures, medians, parse
from bookie.workers.auth import PLAINTEXT_ENV


def one_run(in_flight: int, curve: bool, time_s: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLAINTEXT_ENV}
    # over TCP both ways: a client on the bookie's host would otherwise take its local socket
    # (bench/transport_cost.py measures that one beside these two)
    flags = ["--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1",
             "--set", "useLocalSockets=false"]
    if not curve:  # the bookie's registration then publishes no key: the client must allow it
        env[PLAINTEXT_ENV] = "1"
        flags += ["--set", "allowClearTextBookies=true"]
    return bench_writes(flags, in_flight, time_s, f"curve {curve}", env=env)


def summarise(in_flight: int, on: list[dict], off: list[dict]) -> dict:
    med = {"on": medians(on), "off": medians(off)}
    return {"tool": "curve_cost", "in_flight": in_flight, "rounds": len(on),
            "curve_on": med["on"], "curve_off": med["off"],
            "ratio": {"ops_per_s": med["on"]["ops_per_s"] / med["off"]["ops_per_s"],
                      "p50_ms": med["on"]["p50_ms"] / med["off"]["p50_ms"],
                      "cpu_us": med["on"]["cpu_us"] / med["off"]["cpu_us"]},
            "load_avg": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    args = parse(argv, "python -m bookie.bench.curve_cost", __doc__.split("\n\n")[0],
                 "with CURVE", 5.0, "1,256")
    summaries = alternate(args, "curve", lambda n, on: one_run(n, on, args.time), figures,
                          summarise)
    for s in summaries:
        on, off, ratio = s["curve_on"], s["curve_off"], s["ratio"]
        print(f"{s['in_flight']:>4} in flight, {s['rounds']} rounds: adds/s {on['ops_per_s']:,.0f} "
              f"CURVE / {off['ops_per_s']:,.0f} plain = {ratio['ops_per_s']:.3f}; p50 "
              f"{on['p50_ms']:.3f} / {off['p50_ms']:.3f} ms = {ratio['p50_ms']:.3f}; CPU per add "
              f"{on['cpu_us']:.1f} / {off['cpu_us']:.1f} us = {ratio['cpu_us']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
