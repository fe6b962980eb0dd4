"""``bookie bench compaction``: entry-log compaction speed, and what it costs foreground adds.

For each mode (no rate limit, then ``compactionRateByBytes`` with ``isThrottleByBytes``), on a
fresh local bookie:

1. write ``--data-mb`` MB to two ledgers, interleaved batch by batch (every entry log half one,
   half the other), and measure the entry logs' disk usage;
2. run lone foreground adds (one entry, one at a time, to a third ledger) for ``--baseline-s``
   seconds: the baseline latency;
3. delete one of the two ledgers from the metadata store and ask for a major compaction
   (``gc.request.major``, as ``bookie shell triggergc --major``), the foreground adds going on;
4. when the bookie logs ``compaction done``: compaction MB/s (entry bytes copied / pass time,
   and old-log bytes processed / pass time), the foreground p50/p99/max during the pass, the
   longest repoint transaction (it holds the index's writer), the disk usage after; the kept
   ledger is read back and compared byte for byte.

Progress and a summary on stderr, one JSON line on stdout (``--json-out`` appends it to a file).
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time

import orjson

from bookie.bench.errors import BenchOptionError
from bookie.metadata import LedgerMetadata, open_metadata


def register(tools) -> None:
    p = tools.add_parser("compaction", help="entry-log compaction MB/s and foreground add "
                                            "latency while it runs, with and without the rate limit")
    p.add_argument("--data-mb", type=float, default=256.0, metavar="MB",
                   help="entry data written, half of it then deleted (default 256)")
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes per entry (default 1024)")
    p.add_argument("--log-size-mb", type=int, default=64, metavar="MB",
                   help="logSizeLimit of the bookie (default 64)")
    p.add_argument("--limit-mb-per-s", type=float, default=16.0, metavar="MB",
                   help="compactionRateByBytes of the rate-limited run, MB/s (default 16)")
    p.add_argument("--baseline-s", type=float, default=5.0, metavar="S",
                   help="seconds of foreground adds before the compaction (default 5)")
    p.add_argument("--data-dir", metavar="DIR", help="where the bookies keep their data "
                   "(default: a temporary directory, removed after)")
    p.add_argument("--json-out", metavar="FILE", help="append the JSON result line to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:

    if args.data_mb <= 0 or args.entrysize < 1 or args.log_size_mb < 1 or args.limit_mb_per_s <= 0:
        raise BenchOptionError("--data-mb, --entrysize, --log-size-mb and --limit-mb-per-s must be positive")
    emit = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    base = args.data_dir or tempfile.mkdtemp(prefix="bench-compaction-")
    try:
        result = {"tool": "compaction", "host": platform.node(), "load_before": os.getloadavg(),
                  "params": {k: getattr(args, k) for k in ("data_mb", "entrysize", "log_size_mb",
                                                           "limit_mb_per_s", "baseline_s")},
                  "runs": []}
        for mode, limit in (("unlimited", 0), ("limited", int(args.limit_mb_per_s * 1e6))):
            run = run_once(os.path.join(base, mode), args, limit, emit)
            run["mode"] = mode
            result["runs"].append(run)
        result["load_after"] = os.getloadavg()
    finally:
        if not args.data_dir:
            shutil.rmtree(base, ignore_errors=True)
    for r in result["runs"]:
        print(f"{r['mode']:>9}: compaction {r['copied_mb_per_s']:.1f} MB/s copied "
              f"({r['processed_mb_per_s']:.1f} MB/s of old logs), {r['seconds']:.2f} s; "
              f"disk {r['disk_before_mb']:.1f} -> {r['disk_after_mb']:.1f} MB; foreground add "
              f"p99 {r['baseline']['p99_ms']:.2f} ms before, {r['during']['p99_ms']:.2f} ms during "
              f"(max {r['during']['max_ms']:.2f}, {r['during']['n']} adds); longest repoint "
              f"transaction {r['repoint_ms_max']:.1f} ms", file=sys.stderr)
    line = json.dumps(result)
    print(line)
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(line + "\n")
    return 0 if all(r["kept_ok"] for r in result["runs"]) else 1


def _percentiles(samples: list[float]) -> dict:
    if not samples:
        return {"n": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    s = sorted(samples)
    return {"n": len(s), "p50_ms": s[len(s) // 2] * 1e3, "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3,
            "max_ms": s[-1] * 1e3}


def _log_bytes(ledger_dir: str) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in glob.glob(os.path.join(ledger_dir, "*.log")))


class Foreground(threading.Thread):
    """Lone adds, one at a time, to one ledger; latencies tagged by phase."""

    def __init__(self, bookie: str, ledger_id: int, key: bytes, size: int):
        super().__init__(daemon=True)
        self.bookie, self.ledger_id, self.key, self.size = bookie, ledger_id, key, size
        self.phase = "baseline"
        self.samples: dict[str, list[float]] = {"baseline": [], "during": []}
        self.stop = False
        self.errors = 0

    def run(self) -> None:
        from bookie.testing.rawclient import RawBookieClient, make_entry  # lazy: zmq
        from bookie.wire import Status  # lazy: numpy

        payload = os.urandom(self.size)
        with RawBookieClient(self.bookie, timeout_s=60) as c:
            eid = 0
            while not self.stop:
                t0 = time.perf_counter()
                status = c.add(self.ledger_id, [make_entry(self.ledger_id, eid, payload)], self.key)
                dt = time.perf_counter() - t0
                if status != Status.OK:
                    self.errors += 1
                    continue
                phase = self.phase
                if phase in self.samples:
                    self.samples[phase].append(dt)
                eid += 1


def run_once(base: str, args, limit_bytes_per_s: int, emit) -> dict:
    from bookie.testing import LocalBookies  # lazy: zmq
    from bookie.testing.rawclient import RawBookieClient, make_entry  # lazy: zmq
    from bookie.wire import Status  # lazy: numpy
    from bookie.workers.gc_worker import request_gc  # lazy: lmdb

    key = b"bench"
    conf = {"logSizeLimit": args.log_size_mb << 20, "entryLogFilePreallocationEnabled": "false",
            "gcWaitTime": 3_600_000, "minorCompactionInterval": 0, "majorCompactionInterval": 0,
            "compactionRateByEntries": 0, "compactionRateByBytes": limit_bytes_per_s,
            "isThrottleByBytes": "true" if limit_bytes_per_s else "false",
            "journalRingSizeMB": 64}
    with LocalBookies(1, base_dir=base, conf=conf, start_timeout_s=120) as ens, \
            open_metadata(ens.metadata_uri) as store:
        ledger_dir = os.path.join(ens.bookie_dir(0), "ledgers", "current")
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        doomed, kept, fg = (store.create_ledger(meta)[0] for _ in range(3))
        per_batch = max(1, (256 * 1024) // args.entrysize)
        batches = max(1, int(args.data_mb * 1e6 / (args.entrysize * per_batch * 2)))
        payloads = [os.urandom(args.entrysize) for _ in range(per_batch)]
        t0 = time.monotonic()
        with RawBookieClient(ens.bookies[0], timeout_s=60) as c:
            for b in range(batches):
                for lid in (doomed, kept):
                    entries = [make_entry(lid, b * per_batch + i, payloads[i]) for i in range(per_batch)]
                    if c.add(lid, entries, key) != Status.OK:
                        raise RuntimeError(f"add to ledger {lid} failed")
                if b % 50 == 0:
                    emit(f"[{os.path.basename(base)}] written {2 * (b + 1) * per_batch * args.entrysize / 1e6:.0f} MB")
        emit(f"[{os.path.basename(base)}] written in {time.monotonic() - t0:.1f} s")
        time.sleep(1.0)  # a checkpoint or two
        before = _log_bytes(ledger_dir)
        worker = Foreground(ens.bookies[0], fg, key, args.entrysize)
        worker.start()
        time.sleep(args.baseline_s)
        store.remove_ledger(doomed)
        start = len(ens.log(0))
        with open(os.path.join(ens.bookie_dir(0), "journal", "bookie.lock"), "rb") as f:
            run_dir = orjson.loads(f.read())["run_dir"]
        worker.phase = "during"
        request_gc(run_dir, major=True)
        deadline = time.monotonic() + 3600
        done = None
        while time.monotonic() < deadline and done is None:
            time.sleep(0.2)
            for line in ens.log(0)[start:].splitlines():
                if "compaction done" in line:
                    done = dict(re.findall(r"(\w+)=(\S+)", line))
        worker.phase = "after"
        worker.stop = True
        worker.join(60)
        if done is None:
            raise RuntimeError("no 'compaction done' within an hour")
        after = _log_bytes(ledger_dir)
        repoint_ms = [float(m) for m in re.findall(r"gc: compacted .* repoint_ms=(\S+)", ens.log(0)[start:])]
        kept_ok = True
        with RawBookieClient(ens.bookies[0], timeout_s=60) as c:
            got = 0
            total = batches * per_batch
            while got < total:
                status, entries = c.read(kept, got, max_count=min(1000, total - got))
                if status != Status.OK:
                    kept_ok = False
                    break
                for i, e in enumerate(entries):
                    eid = got + i
                    if bytes(e) != make_entry(kept, eid, payloads[eid % per_batch]):
                        kept_ok = False
                got += len(entries)
        seconds = float(done["seconds"])
        copied = int(done["copied_bytes"])
        processed = copied + int(done["reclaimed_bytes"])
        run = {"seconds": seconds, "logs_done": int(done["logs_done"]), "copied_bytes": copied,
               "copied_mb_per_s": copied / seconds / 1e6 if seconds else 0.0,
               "processed_mb_per_s": processed / seconds / 1e6 if seconds else 0.0,
               "disk_before_mb": before / 1e6, "disk_after_mb": after / 1e6,
               "baseline": _percentiles(worker.samples["baseline"]),
               "during": _percentiles(worker.samples["during"]),
               "repoint_ms_max": max(repoint_ms, default=0.0),
               "foreground_errors": worker.errors, "kept_ok": kept_ok,
               "limit_bytes_per_s": limit_bytes_per_s, "load": os.getloadavg()}
        emit(f"[{os.path.basename(base)}] {json.dumps(run)}")
        return run
