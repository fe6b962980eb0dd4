"""The client transports' cost on the whole add path: ``bookie bench writes`` against one local
bookie (E=Qw=Qa=1, 1 KiB), over the bookie's local socket (the default on its host: ipc, no
cipher, workers/local_sockets.py), over TCP with the pinned CURVE key (``useLocalSockets=false``)
and over plain TCP (the baseline: ``BOOKIE_BENCH_PLAINTEXT=1`` in the bookie's environment,
workers/auth.py), the three rotated round by round in one run, so a shared machine's drifting
load falls on all alike (issue 40: at 256 in flight the local socket at least as fast as plain
TCP).

    python -m bookie.bench.transport_cost [--rounds N] [--time S] [--in-flight 1,256] [--json-out F]

Prints each ``bench writes`` JSON line (with ``"transport": "local"|"curve"|"plain"`` and the
round added), then one summary line per window: throughput, p50, p99 and CPU per add of each
transport from the medians of the rounds, and each over plain TCP.
"""

from __future__ import annotations

import os
import sys

from bookie.bench.alternated import bench_writes, emitter, figures, medians, parse
from bookie.workers.auth import PLAINTEXT_ENV

TRANSPORTS = ("local", "curve", "plain")


def one_run(in_flight: int, transport: str, time_s: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PLAINTEXT_ENV}
    flags = ["--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--ack-quorum", "1"]
    if transport != "local":
        flags += ["--set", "useLocalSockets=false"]
    if transport == "plain":  # the bookie's registration then publishes no key
        env[PLAINTEXT_ENV] = "1"
        flags += ["--set", "allowClearTextBookies=true"]
    return bench_writes(flags, in_flight, time_s, transport, env=env)


def summarise(in_flight: int, runs: dict[str, list[dict]]) -> dict:
    med = {t: medians(runs[t]) for t in TRANSPORTS}
    base = med["plain"]
    return {"tool": "transport_cost", "in_flight": in_flight, "rounds": len(runs["plain"]),
            **{t: med[t] for t in TRANSPORTS},
            "over_plain": {t: {k: med[t][k] / base[k] for k in base} for t in TRANSPORTS},
            "load_avg": os.getloadavg()[0]}


def main(argv: list[str]) -> int:
    args = parse(argv, "python -m bookie.bench.transport_cost", __doc__.split("\n\n")[0],
                 "per transport", 5.0, "1,256")

    emit = emitter(args.json_out)
    for in_flight in args.windows:
        runs: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
        for r in range(args.rounds):
            order = TRANSPORTS[r % 3:] + TRANSPORTS[:r % 3]  # each goes first in turn
            for transport in order:
                result = one_run(in_flight, transport, args.time)
                emit({**result, "transport": transport, "round": r})
                runs[transport].append(figures(result))
        s = summarise(in_flight, runs)
        emit(s)
        print(f"{in_flight:>4} in flight, {s['rounds']} rounds: " + "; ".join(
            f"{t} {s[t]['ops_per_s']:,.0f} adds/s ({s['over_plain'][t]['ops_per_s']:.3f} of plain), "
            f"p50 {s[t]['p50_ms']:.3f} ms, CPU {s[t]['cpu_us']:.1f} us/add" for t in TRANSPORTS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
