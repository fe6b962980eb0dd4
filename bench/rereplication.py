"""Re-replication throughput and the foreground add latency while it runs, throttled and not.

    python -m bookie.bench.rereplication [--bookies 6] [--ledgers 8] [--entries 400]
        [--entry-bytes 10000] [--rates -1,2000000] [--batch 100]

Starts LocalBookies (autorecovery off: the copy is driven by ``bookie shell recover`` in its own
process, so it is measured alone), writes the ledgers (E3/Qw2/Qa2), then for each rate: kills
one more bookie for good, runs ``recover`` on it at that rate while a foreground writer adds
1 KB entries (``recover --skip-open-ledgers``: the writer's own ledger is left to it), and prints the copy's MB/s and the
foreground add p50/p99 during the copy, beside a baseline p99 taken with no copy running.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import orjson


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Foreground:
    """Adds 1 KB entries one at a time (sync) and records each add's latency."""

    def __init__(self, bk):
        self.bk = bk
        self.latencies: list[tuple[float, float]] = []  # (start, seconds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        h = self.bk.create_ledger(3, 2, 2)
        payload = b"f" * 1024
        while not self.stop.is_set():
            t = time.monotonic()
            h.add_entry(payload)
            self.latencies.append((t, time.monotonic() - t))
        h.close()

    def between(self, a, b):
        return [s for t, s in self.latencies if a <= t <= b]


def main(argv=None) -> int:
    from bookie.client import BookKeeper  # lazy: zmq
    from bookie.testing import LocalBookies  # lazy: zmq

    p = argparse.ArgumentParser(prog="python -m bookie.bench.rereplication")
    p.add_argument("--bookies", type=int, default=6)
    p.add_argument("--ledgers", type=int, default=8)
    p.add_argument("--entries", type=int, default=400)
    p.add_argument("--entry-bytes", type=int, default=10_000)
    p.add_argument("--rates", default="-1,2000000", help="replicationRateByBytes per run")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--baseline-s", type=float, default=8.0)
    args = p.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    if args.bookies - len(rates) < 4:
        p.error("need at least 4 bookies left after the kills (E3 plus a replacement)")
    results = []
    with LocalBookies(args.bookies) as lb, BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
        payload = b"r" * args.entry_bytes
        for _ in range(args.ledgers):
            h = bk.create_ledger(3, 2, 2)
            for _ in range(args.entries):
                h.add_entry_async(payload)
            h.close()
        fg = Foreground(bk)
        fg.thread.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        time.sleep(args.baseline_s)
        baseline = fg.between(t0, time.monotonic())
        for n, rate in enumerate(rates):
            victim = lb.bookies[n]
            killed_at = time.monotonic()
            lb.kill(n)
            # the writer replaces the killed bookie first (an ensemble change): start the copy
            # only once foreground adds flow again, so the figures are the copy's alone
            deadline = killed_at + 120
            while len(fg.between(killed_at, time.monotonic())) < 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            env = dict(os.environ)
            t_start = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-m", "bookie", "shell", "recover", victim, "--json",
                 "--skip-open-ledgers",
                 "--batch", str(args.batch), "--rate-bytes-per-s", str(rate),
                 "--metadata", lb.metadata_uri, "--timeout-s", "30"],
                capture_output=True, env=env, check=False)
            t_end = time.monotonic()
            if out.returncode != 0:
                print(out.stderr.decode()[-2000:], file=sys.stderr)
            doc = orjson.loads(out.stdout) if out.stdout else {}
            copy_s = doc.get("copy_seconds") or (t_end - t_start)
            during = fg.between(t_end - copy_s, t_end)
            mb = doc.get("copied_bytes", 0) / 1e6
            results.append({
                "rate_limit_bytes_per_s": rate, "copied_mb": round(mb, 1),
                "seconds": round(copy_s, 1), "command_s": round(t_end - t_start, 1),
                "mb_per_s": round(mb / max(copy_s, 1e-9), 2),
                "ledgers": doc.get("ledgers"), "failed": doc.get("failed"),
                "fg_adds": len(during),
                "fg_p50_ms": round(_percentile(during, 0.5) * 1000, 1),
                "fg_p99_ms": round(_percentile(during, 0.99) * 1000, 1),
            })
        fg.stop.set()
        fg.thread.join(30)
    print(orjson.dumps({
        "baseline": {"fg_adds": len(baseline),
                     "fg_p50_ms": round(_percentile(baseline, 0.5) * 1000, 1),
                     "fg_p99_ms": round(_percentile(baseline, 0.99) * 1000, 1)},
        "runs": results, "load": os.getloadavg()}, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
