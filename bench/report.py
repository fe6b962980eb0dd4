"""What every benchmark reports: live progress, a human summary and one JSON line.

Theory of operation
-------------------
A benchmark run is one or more *phases* (``sync`` then ``pipelined`` for ``bench bookie``, ``raw``
then ``journal`` for ``bench journal``...).  Each phase has a ``Meter``: the tool's loop tells it
about completions (``record``) and asks it, as often as it likes, whether a progress interval is
over (``tick``); the meter then closes the interval, keeps its figures for the timeline and
prints one progress line.  The meter takes time as an argument (monotonic nanoseconds) and
prints through a callable, so it is plain code the tests drive with a fake clock.

At the end, ``build_result`` puts the parameters, the host (cores, memory, the disk of the data
directory, versions, load average: how noisy the machine was) and every phase's figures into one
dict; ``emit`` writes it as one JSON line on stdout (the only thing a tool writes there, so
``bookie bench ... | jq`` works), appends it to ``--json-out`` when given, and prints the human
summary on stderr.  bench/README.md lists every field.

Units: latencies are recorded in nanoseconds and reported in milliseconds; MB is 10**6 bytes of
payload (entry data as the user gave it, not the framing around it).
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from typing import Callable

import numpy
import orjson
import zmq

from bookie import compiled
from bookie.bench import cpu
from bookie.bench.histogram import Histogram

SCHEMA = 1
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
MB = 1_000_000


def latency_figures(hist: Histogram) -> dict:
    """p50 / p95 / p99 / p99.9 / max / mean in ms, and the count, of a histogram."""
    values = hist.percentiles([p for _, p in PERCENTILES])
    out = {name: v / NS_PER_MS for (name, _), v in zip(PERCENTILES, values)}
    out["max"] = hist.max / NS_PER_MS
    out["mean"] = hist.mean / NS_PER_MS
    out["count"] = hist.count
    return out


class Meter:
    """Figures of one benchmark phase, with a progress line per interval.

    Args:
        phase: the phase's name, shown in progress lines and used as its key in the result.
        unit: what one operation is ("adds", "entries", "records"), for the progress line.
        emit: called with each progress line; None for quiet.
        interval_s: length of a progress interval.
    """

    def __init__(self, phase: str, *, unit: str = "adds", emit: Callable[[str], None] | None = None,
                 interval_s: float = 1.0):
        self.phase = phase
        self.unit = unit
        self.emit = emit
        self.interval_ns = int(interval_s * NS_PER_S)
        self.total = Histogram()
        self.interval = Histogram()
        self.timeline: list[dict] = []
        self.ops = 0
        self.bytes = 0
        self.errors = 0
        self._interval_ops = 0
        self._interval_bytes = 0
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self._interval_start_ns = 0
        self.next_tick_ns = 0
        self._cpu_start: dict | None = None
        self.cpu_us_per_op: dict[str, float] = {}

    def start(self, now_ns: int) -> None:
        self.start_ns = self._interval_start_ns = now_ns
        self._cpu_start = cpu.snapshot()
        self.next_tick_ns = now_ns + self.interval_ns

    def record(self, latency_ns: int, count: int = 1, nbytes: int = 0) -> None:
        """``count`` operations completed with this latency, carrying ``nbytes`` of payload."""
        self.interval.record(latency_ns, count)
        self._interval_ops += count
        self._interval_bytes += nbytes

    def record_many(self, latencies_ns, nbytes: int = 0) -> None:
        """One operation per latency (an array), ``nbytes`` of payload between them."""
        self.interval.record_many(latencies_ns)
        self._interval_ops += len(latencies_ns)
        self._interval_bytes += nbytes

    def record_corrected(self, latency_ns: int, expected_interval_ns: int, count: int = 1,
                         nbytes: int = 0) -> None:
        """``count`` operations of a closed loop paced every ``expected_interval_ns`` completed
        with this latency; the histogram also gets the samples coordinated omission hid, so
        its count may exceed the operations."""
        for _ in range(count):
            self.interval.record_corrected(latency_ns, expected_interval_ns)
        self._interval_ops += count
        self._interval_bytes += nbytes

    def record_error(self, count: int = 1) -> None:
        self.errors += count

    def tick(self, now_ns: int, outstanding: int = 0) -> bool:
        """Close the progress interval if it is over.  Returns True when it was."""
        if now_ns < self.next_tick_ns:
            return False
        self._close_interval(now_ns, outstanding)
        # Stay on the beat, but never close an interval of less than half a beat: a caller
        # that ticked late would otherwise get a sliver whose rate is noise.
        self.next_tick_ns += self.interval_ns
        while self.next_tick_ns < now_ns + self.interval_ns // 2:
            self.next_tick_ns += self.interval_ns
        return True

    def finish(self, now_ns: int, outstanding: int = 0) -> dict:
        """Close the last (partial) interval and return the phase's figures."""
        if self.start_ns is None:
            raise RuntimeError("finish() before start()")
        # A last sliver of an interval counts in the totals, but as a point of the timeline its
        # rate would be noise (a few answers over a few ms); so only longer ones get a point.
        self._close_interval(now_ns, outstanding,
                             point=now_ns - self._interval_start_ns >= self.interval_ns // 4)
        self.end_ns = now_ns
        self.cpu_us_per_op = cpu.per_op_us(self._cpu_start or {}, cpu.snapshot(), self.ops)
        return self.figures()

    def _close_interval(self, now_ns: int, outstanding: int, point: bool = True) -> None:
        span_s = max(now_ns - self._interval_start_ns, 1) / NS_PER_S
        self.total.merge(self.interval)
        self.ops += self._interval_ops
        self.bytes += self._interval_bytes
        if point:
            self._add_point(now_ns, span_s, outstanding)
        self.interval.reset()
        self._interval_ops = self._interval_bytes = 0
        self._interval_start_ns = now_ns

    def _add_point(self, now_ns: int, span_s: float, outstanding: int) -> None:
        p50, p99, p999 = self.interval.percentiles([50, 99, 99.9])
        point = {
            "t_s": round((now_ns - self.start_ns) / NS_PER_S, 3),
            "ops_per_s": self._interval_ops / span_s,
            "mb_per_s": self._interval_bytes / span_s / MB,
            "p50_ms": p50 / NS_PER_MS,
            "p99_ms": p99 / NS_PER_MS,
            "p999_ms": p999 / NS_PER_MS,
            "max_ms": self.interval.max / NS_PER_MS,
            "p99_total_ms": self.total.percentile(99) / NS_PER_MS,
            "outstanding": outstanding,
        }
        self.timeline.append(point)
        if self.emit is not None:
            self.emit(progress_line(self.phase, self.unit, point))

    def figures(self) -> dict:
        duration_s = max((self.end_ns or self._interval_start_ns) - self.start_ns, 1) / NS_PER_S
        return {
            "unit": self.unit,
            "ops": self.ops,
            "bytes": self.bytes,
            "errors": self.errors,
            "duration_s": duration_s,
            "ops_per_s": self.ops / duration_s,
            "mb_per_s": self.bytes / duration_s / MB,
            "latency_ms": latency_figures(self.total),
            "latency_clamped": self.total.clamped,
            "timeline": self.timeline,
            "cpu_us_per_op": self.cpu_us_per_op,
        }


def progress_line(phase: str, unit: str, point: dict) -> str:
    return (f"[{phase}] {point['t_s']:7.1f} s {point['ops_per_s']:11,.0f} {unit}/s "
            f"{point['mb_per_s']:8.1f} MB/s  p99 {point['p99_total_ms']:8.3f} ms  "
            f"outstanding {point['outstanding']}")


# -- the host ----------------------------------------------------------------------------------


def _meminfo_bytes(key: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _mount_of(path: str) -> dict:
    """Device and file-system type of the mount holding ``path`` (longest matching mount)."""
    path = os.path.realpath(path)
    best = {"mount": None, "device": None, "fstype": None}
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                device, mount, fstype = line.split()[:3]
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best["mount"] or ""):
                    best = {"mount": mount, "device": device, "fstype": fstype}
    except OSError:
        pass
    return best


def disk_info(path: str) -> dict:
    """Size, free space, device and file system of the disk holding ``path`` (statvfs)."""
    st = os.statvfs(path)
    info = {"path": os.path.abspath(path), "total_bytes": st.f_frsize * st.f_blocks,
            "free_bytes": st.f_frsize * st.f_bavail}
    info.update(_mount_of(path))
    return info


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    return getattr(mod, "__version__", None)


def versions() -> dict:
    from bookie import __version__ as bookie_version  # lazy: importlib.metadata

    return {
        "bookie": bookie_version,
        "python": platform.python_version(),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "numpy": numpy.__version__,
        "lmdb": _version("lmdb"),
        "orjson": orjson.__version__,
        # which of bookie.compiled's modules ran compiled in this process (the client's; a
        # local bookie's workers load the same install): "compiled: wire, ..." or "pure Python"
        "bookie_build": compiled.describe(),
    }


def host_info(data_dir: str | None = None) -> dict:
    """The machine a run was made on: cores, memory, kernel, CPU, load and the data disk."""
    cpu_model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "memory_bytes": _meminfo_bytes("MemTotal"),
        "memory_available_bytes": _meminfo_bytes("MemAvailable"),
        "kernel": platform.release(),
        "load_avg": list(os.getloadavg()),
        "disk": disk_info(data_dir) if data_dir else None,
        "versions": versions(),
    }


# -- the result --------------------------------------------------------------------------------


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def build_result(tool: str, params: dict, phases: dict[str, dict], *, data_dir: str | None = None,
                 figures: dict | None = None, started: str | None = None,
                 host: dict | None = None) -> dict:
    """The one JSON object of a run (see bench/README.md for every field).

    Args:
        tool: the subcommand ("writes", "bookie", "reads", "journal").
        params: every parameter of the run, as used (defaults filled in).
        phases: phase name -> ``Meter.finish()`` figures (plus tool-specific figures).
        data_dir: the directory whose disk the run used, for ``host.disk``.
        figures: tool-level figures that belong to no single phase (``ratio`` of bench journal).
    """
    host = host if host is not None else host_info(data_dir)
    host["load_avg_end"] = list(os.getloadavg())
    result = {
        "schema": SCHEMA,
        "tool": tool,
        "date": started or now_iso(),
        "params": params,
        "host": host,
        "phases": phases,
        "figures": figures or {},
        "cpu_us_per_op": headline_cpu(phases),
    }
    return result


# The phase whose CPU per operation a run's ``cpu_us_per_op`` repeats: the one its tool is about
# (the lone adds of ``bench bookie`` when it ran no pipelined phase; the tail, not the writer).
HEADLINE_PHASES = ("pipelined", "writes", "sequential", "tail", "journal", "trace", "sync")


def headline_cpu(phases: dict[str, dict]) -> dict:
    """``cpu_us_per_op`` of the run's main phase (HEADLINE_PHASES, else its last phase that has
    the figure; ``{}`` when none has)."""
    for name in (*HEADLINE_PHASES, *reversed(list(phases))):
        figure = phases.get(name, {}).get("cpu_us_per_op")
        if figure:
            return figure
    return {}


def dumps(result: dict) -> bytes:
    return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)


def emit(result: dict, *, json_out: str | None = None, out=None, err=None) -> None:
    """Write the JSON line on ``out`` (stdout), append it to ``json_out``, summary on ``err``."""
    out = out or sys.stdout
    err = err or sys.stderr
    line = dumps(result).decode()
    err.write(summary_text(result))
    err.flush()
    out.write(line + "\n")
    out.flush()
    if json_out:
        with open(json_out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def summary_text(result: dict) -> str:
    """A human summary: one block per phase, then the tool-level figures."""
    lines = [f"bookie bench {result['tool']}  {result['date']}  "
             f"({result['host']['cores']} cores, load {result['host']['load_avg'][0]:.2f})"]
    for name, ph in result["phases"].items():
        lat = ph["latency_ms"]
        lines.append(
            f"  {name}: {ph['ops']:,} {ph['unit']} in {ph['duration_s']:.2f} s = "
            f"{ph['ops_per_s']:,.0f} {ph['unit']}/s, {ph['mb_per_s']:.1f} MB/s, "
            f"errors {ph['errors']}")
        lines.append(
            f"    latency ms: p50 {lat['p50']:.3f}  p95 {lat['p95']:.3f}  p99 {lat['p99']:.3f}  "
            f"p99.9 {lat['p999']:.3f}  max {lat['max']:.3f}  (mean {lat['mean']:.3f}, "
            f"{lat['count']:,} samples)")
        if ph.get("cpu_us_per_op"):
            inner = "  ".join(f"{k} {v:.1f}" for k, v in ph["cpu_us_per_op"].items())
            one = {"entries": "entry"}.get(ph["unit"], ph["unit"].rstrip("s"))
            lines.append(f"    CPU us per {one}: {inner}")
        if ph.get("interrupted"):
            lines.append(f"    interrupted: {ph['interrupted']}")
        for key, value in ph.items():
            if key.endswith("_ms") and key != "latency_ms" and isinstance(value, dict):
                inner = "  ".join(f"{k} {v:.3f}" for k, v in value.items() if k != "count")
                lines.append(f"    {key[:-3]} ms: {inner}")
    for key, value in result["figures"].items():
        lines.append(f"  {key}: {value:.3f}" if isinstance(value, float) else f"  {key}: {value}")
    return "\n".join(lines) + "\n"


def load_results(path: str) -> list[dict]:
    """Every JSON line of a results file (as appended by ``--json-out``), in order.

    Raises:
        ValueError: a line that is not a JSON object, with its line number.
    """
    results = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({e})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: not a JSON object")
            results.append(obj)
    return results
