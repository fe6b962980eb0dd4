"""The performance issue's table: each bookie figure as a ratio to its peer from the same run.

Theory of operation
-------------------
``bookie bench report`` runs the standard set (bench/standard.py), then the peers
(bench/peers.py: Redis streams with ``appendfsync always`` at 256 in flight and at one add at a
time, a 3-server ZooKeeper at 256 in flight) and, with ``--spark``, ``bench spark``, appending
every result to one results file.  ``render`` reads that file and builds one row per measure of
the issue: the bookie's figure, the peer's (or the limit's: the disk) from the same file, their
ratio and the goal, with a verdict.  A row whose results are missing says which; nothing here
runs anything but ``run_peers`` / ``run_spark``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from typing import Callable

import orjson

from bookie.bench import standard

W256_1 = "client, 1 bookie, E=Qw=Qa=1, 256 in flight"
W256_3 = "client, 3 bookies, E=3 Qw=2 Qa=2, 256 in flight"
QD1 = "client, 1 bookie, E=Qw=Qa=1, one add at a time"
PEAK = "client, 1 bookie, E=Qw=Qa=1"
W_E3 = "client, 3 bookies, E=3 Qw=2 Qa=2"
READS_E3 = "reads of a closed ledger, 3 bookies, E=3 Qw=2 (striped READ)"
TAIL_HALF = "tailing reads, writer at half the full-speed rate, 1 bookie"
JOURNAL = "journal alone vs raw fdatasync"


class Missing(LookupError):
    """A result the row needs is not in the file (or is a failed peer run): the text says which."""


def bookie_run(results: list[dict], name: str) -> dict:
    found = standard.latest(standard.by_name(name), results)
    if found is None:
        raise Missing(f"no result of \"{name}\"")
    return found


def peer_run(results: list[dict], system: str, in_flight: int | None = None) -> dict:
    found = [r for r in results if r.get("tool") == "peer"
             and r.get("params", {}).get("system") == system
             and (in_flight is None or r["params"].get("in_flight") == in_flight)]
    if not found:
        raise Missing(f"{system} not run")
    if found[-1].get("error"):
        raise Missing(f"{system}: {found[-1]['error']}")
    return found[-1]


def spark_run(results: list[dict]) -> dict:
    found = [r for r in results if r.get("tool") == "spark"]
    if not found:
        raise Missing("not run (--spark)")
    return found[-1]


def _ph(result: dict, phase: str, *path: str) -> float:
    value = result["phases"][phase]
    for key in path:
        value = value[key]
    return value


def _rate(v: float) -> str:
    return f"{v / 1000:,.1f}k/s"


def _ms(v: float) -> str:
    return f"{v:.2f} ms"


@dataclasses.dataclass(frozen=True)
class Goal:
    label: str  # e.g. "ratio", "p99"
    value: float
    target: float
    at_least: bool

    def met(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    def miss(self) -> str:
        how = (f"{100 * (1 - self.value / self.target):.0f}% short" if self.at_least
               else f"{100 * (self.value / self.target - 1):.0f}% over")
        return f"{self.label} {how}"


@dataclasses.dataclass(frozen=True)
class Row:
    measure: str
    goal: str
    # results -> (bookie figure, peer figure, ratio, [Goal]) as text and goals
    compute: Callable[[list[dict]], tuple[str, str, str, list[Goal]]]


def _adds_256_one(results):
    b, r = bookie_run(results, W256_1), peer_run(results, "redis", 256)
    rate, p99 = _ph(b, "writes", "ops_per_s"), _ph(b, "writes", "latency_ms", "p99")
    peer = _ph(r, "adds", "ops_per_s")
    ratio = rate / peer
    return (f"{_rate(rate)}, p99 {_ms(p99)}",
            f"Redis XADD, AOF `appendfsync always`, 16 clients x 16 pipelined: {_rate(peer)}, "
            f"p99 {_ms(_ph(r, 'adds', 'latency_ms', 'p99'))}",
            f"{ratio:.2f}", [Goal("ratio", ratio, 1.0, True), Goal("p99", p99, 5.0, False)])


def _adds_256_three(results):
    b, z = bookie_run(results, W256_3), peer_run(results, "zookeeper")
    rate, peer = _ph(b, "writes", "ops_per_s"), _ph(z, "adds", "ops_per_s")
    ratio = rate / peer
    return (f"{_rate(rate)}, p99 {_ms(_ph(b, 'writes', 'latency_ms', 'p99'))}",
            f"ZooKeeper x3, Java client, 256 in flight: {_rate(peer)}",
            f"{ratio:.1f}", [Goal("ratio", ratio, 8.0, True)])


def _qd1(results):
    b, r = bookie_run(results, QD1), peer_run(results, "redis", 1)
    p50, p99 = _ph(b, "writes", "latency_ms", "p50"), _ph(b, "writes", "latency_ms", "p99")
    peer = _ph(r, "adds", "latency_ms", "p50")
    disk = ""
    with contextlib.suppress(Missing, KeyError):
        disk = (f"; this disk's 4 KiB write + fdatasync: "
                f"{_ms(_ph(bookie_run(results, standard.RAW), 'disk', 'latency_ms', 'p50'))}")
    ratio = p50 / peer
    return (f"{_ms(p50)} / {_ms(p99)}",
            f"Redis XADD at QD1, AOF `appendfsync always`: {_ms(peer)} p50{disk}",
            f"{ratio:.1f}x Redis", [Goal("p50", ratio, 3.0, False), Goal("p99", p99, 1.5, False)])


def _reads(results):
    e3 = _ph(bookie_run(results, READS_E3), "sequential", "ops_per_s")
    e1 = _ph(bookie_run(results, standard.READS_E1), "sequential", "ops_per_s")
    ratio = e3 / e1
    return (f"{_rate(e3)} vs {_rate(e1)} entries/s", "", f"{ratio:.2f}",
            [Goal("ratio", ratio, 0.9, True), Goal("E3 rate", e3, 250_000, True)])


def _peak(results):
    b, j = bookie_run(results, PEAK), bookie_run(results, JOURNAL)
    rate = _ph(b, "writes", "ops_per_s")
    # the disk's grouped-fdatasync bandwidth in entries of the size the journal bench wrote
    # (1 KiB payload + header and digest), the "~480k 1 KiB adds/s"
    disk = _ph(j, "raw", "disk_mb_per_s") * 1e6 / j["figures"]["entry_bytes"]
    return (f"{_rate(rate)}", f"grouped fdatasync of this disk: {_rate(disk)} 1 KiB entries",
            f"{rate / disk:.2f} of the disk", [Goal("rate", rate, 250_000, True)])


def _spark(results):
    s = spark_run(results)
    count, raw = s["spark_count"]["rate_warm"], s["raw_read"]["rate"]
    # the sink's warm rate, as the count's (results older than the warm runs: their one cold run)
    sink = s["spark_sink"].get("rate_warm", s["spark_sink"]["rate"])
    cold = s["spark_sink"].get("rate_cold")
    goals = [Goal("count / raw", count / raw, 0.8, True)]
    writes = ""
    with contextlib.suppress(Missing, KeyError):
        w = _ph(bookie_run(results, W_E3), "writes", "ops_per_s")
        goals.append(Goal("sink / writes", sink / w, 0.5, True))
        writes = f"; `bench writes` E3/Qw2: {_rate(w)}"
    if "raw_write" in s:
        writes += f"; raw client write, same run: {_rate(s['raw_write']['rate'])}"
    sink_text = _rate(sink) + (f" warm ({_rate(cold)} cold)" if cold is not None else "")
    return (f"{_rate(count)} / {sink_text}", f"raw client read of the same ledger: {_rate(raw)}"
            + writes, f"{count / raw:.2f}", goals)


def _tail(results):
    full, half = bookie_run(results, standard.TAIL_FULL), bookie_run(results, TAIL_HALF)
    f99, h99 = _ph(full, "tail", "lag_ms", "p99"), _ph(half, "tail", "lag_ms", "p99")
    return (f"{f99:,.0f} ms / {h99:,.0f} ms",
            f"writer at {_rate(_ph(full, 'writer', 'ops_per_s'))} / "
            f"{_rate(_ph(half, 'writer', 'ops_per_s'))}", "",
            [Goal("full rate", f99, 50.0, False), Goal("half rate", h99, 20.0, False)])


ROWS: tuple[Row, ...] = (
    Row("256 in flight, 1 bookie E=Qw=Qa=1, 1 KiB, fdatasync before ack", ">= 1.0, p99 <= 5 ms",
        _adds_256_one),
    Row("256 in flight, 3 bookies E3/Qw2/Qa2", ">= 8", _adds_256_three),
    Row("one add at a time (QD1), p50 / p99", "p50 <= 3x Redis QD1, p99 <= 1.5 ms", _qd1),
    Row("closed ledger reads, E3/Qw2 vs E1", ">= 0.9, and >= 250k/s", _reads),
    Row("peak, 10,000 in flight, 1 bookie", ">= 250k", _peak),
    Row("Spark: `count()` of an E3/Qw2 ledger (warm) / the sink's append rate (warm)",
        ">= 0.8 of raw reads; sink >= 0.5 of `bench writes` at the same quorum", _spark),
    Row("tail lag p99 (reader behind writer's ack), writer at full rate / half rate",
        "<= 50 / <= 20 ms", _tail),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else " "


def render(results: list[dict]) -> str:
    """The issue's table as Markdown, from the results of one report."""
    lines = ["| measure | bookie | peer or limit, same run | ratio | goal | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in ROWS:
        try:
            bookie, peer, ratio, goals = row.compute(results)
        except Missing as e:
            lines.append(f"| {row.measure} | {_cell(str(e))} | | | {row.goal} | not measured |")
            continue
        except (KeyError, TypeError, ZeroDivisionError) as e:
            lines.append(f"| {row.measure} | absent ({type(e).__name__}: {e}) | | | {row.goal} | "
                         f"not measured |")
            continue
        missed = [g.miss() for g in goals if not g.met()]
        verdict = "met" if not missed else "missed: " + ", ".join(missed)
        lines.append(f"| {row.measure} | {_cell(bookie)} | {_cell(peer)} | {_cell(ratio)} | "
                     f"{row.goal} | {verdict} |")
    return "\n".join(lines) + "\n"


def _append(results_path: str, result: dict) -> None:
    with open(results_path, "ab") as f:
        f.write(orjson.dumps(result) + b"\n")


PEERS = ("redis", "zookeeper")


def run_peers(results_path: str, time_s: float, which=PEERS) -> list[tuple[str, int]]:
    """Run the peers named, appending their results.  Returns (name, 0 or 1) of each."""
    from bookie.bench import peers  # lazy: zmq
    statuses = []
    if "redis" in which:
        print("== peer: Redis streams, appendfsync always, 256 in flight and QD1", file=sys.stderr,
              flush=True)
        for r in peers.run_redis(time_s):
            _append(results_path, r)
            statuses.append(_status("redis", r))
    if "zookeeper" in which:
        print("== peer: ZooKeeper x3, Java client, 256 in flight", file=sys.stderr, flush=True)
        r = peers.run_zookeeper(time_s)
        _append(results_path, r)
        statuses.append(_status("zookeeper", r))
    return statuses


def _status(name: str, result: dict) -> tuple[str, int]:
    if result.get("error"):
        print(f"peer {name}: {result['error']}", file=sys.stderr, flush=True)
        return (f"peer {name}", 1)
    return (f"peer {name}", 0)


def run_spark(results_path: str, time_s: float, data_dir: str, *, bench_main) -> tuple[str, int]:
    """``bench spark`` on three local bookies, E3/Qw2; its JSON line appended."""
    main = bench_main  # ``bookie bench``'s own main (cli.main): it calls this module
    entries = max(2_000, int(20_000 * time_s))
    argv = ["spark", "--localbookie", "3", "--entries", str(entries), "--data-dir",
            os.path.join(data_dir, "spark")]
    print(f"== spark: bookie bench {' '.join(argv)}", file=sys.stderr, flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("{")]
    if rc == 0 and lines:
        result = orjson.loads(lines[-1])
        result.setdefault("tool", "spark")
        _append(results_path, result)
    return ("spark", rc or (0 if lines else 1))
