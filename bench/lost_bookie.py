"""``bookie bench rereplication``: how fast ``bookie shell recover`` heals around a lost bookie.

On fresh local bookies (``--bookies-left`` plus the one to lose, autorecovery off so the copy is
``recover``'s alone):

1. write ledgers (E3/Qw2/Qa2, ``--entries`` entries of ``--entrysize`` bytes each) until the
   bookie to lose holds ``--ledgers`` of them; the last ``--open-ledgers`` of those are left
   open (their writer alive, as in a running cluster: ``recover`` fences and closes them);
2. SIGKILL that bookie and run ``bookie shell recover ID --json`` in its own process;
3. report the ledgers healed and failed, seconds, ledgers/s and MB/s (entry bytes copied over
   the copy's seconds), and check that no ledger names the lost bookie any more.

The issue-32 target: 150 ledgers of 100 x 1 KiB entries, 3 bookies left, done in under 30 s on a
2-core machine.  Progress and a summary on stderr, one JSON line on stdout (``--json-out``
appends it to a file).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import orjson

from bookie.bench.errors import BenchOptionError


def register(tools) -> None:
    p = tools.add_parser("rereplication", help="'bookie shell recover' of a lost bookie holding "
                                               "many ledgers: ledgers/s and MB/s")
    p.add_argument("--ledgers", type=int, default=150, help="ledgers the lost bookie holds (150)")
    p.add_argument("--entries", type=int, default=100, help="entries per ledger (100)")
    p.add_argument("--entrysize", type=int, default=1024, metavar="BYTES",
                   help="payload bytes per entry (1024)")
    p.add_argument("--bookies-left", type=int, default=3, help="bookies that stay (3, at least 3)")
    p.add_argument("--open-ledgers", type=int, default=0,
                   help="of the ledgers, how many are left open by a live writer (0)")
    p.add_argument("--batch", type=int, default=100, help="recover --batch (100)")
    p.add_argument("--data-dir", metavar="DIR", help="where the bookies keep their data "
                   "(default: a temporary directory, removed after)")
    p.add_argument("--json-out", metavar="FILE", help="append the JSON result line to FILE")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:

    if args.ledgers < 1 or args.entries < 1 or args.entrysize < 1 or args.batch < 1:
        raise BenchOptionError("--ledgers, --entries, --entrysize and --batch must be positive")
    if args.bookies_left < 3:
        raise BenchOptionError("--bookies-left must be at least 3 (ensembles of 3)")
    if not 0 <= args.open_ledgers <= args.ledgers:
        raise BenchOptionError("--open-ledgers must be between 0 and --ledgers")
    emit = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    base = args.data_dir or tempfile.mkdtemp(prefix="bench-rereplication-")
    try:
        result = run_once(base, args, emit)
    finally:
        if not args.data_dir:
            shutil.rmtree(base, ignore_errors=True)
    print(f"recover: {result['healed']}/{result['ledgers']} ledgers healed "
          f"({result['failed']} to retry) in {result['seconds']:.1f} s: "
          f"{result['ledgers_per_s']:.1f} ledgers/s, {result['mb_per_s']:.2f} MB/s "
          f"({result['copied_mb']:.1f} MB copied)", file=sys.stderr)
    line = orjson.dumps(result).decode()
    print(line)
    if args.json_out:
        with open(args.json_out, "a") as f:
            f.write(line + "\n")
    return 0 if result["failed"] == 0 and result["still_named"] == 0 else 1


def run_once(base: str, args, emit) -> dict:
    from bookie.client import BookKeeper  # lazy: zmq
    from bookie.testing import LocalBookies  # lazy: zmq

    n = args.bookies_left + 1
    result = {"tool": "rereplication", "host": platform.node(), "cpus": os.cpu_count(),
              "load_before": os.getloadavg(),
              "params": {k: getattr(args, k) for k in ("ledgers", "entries", "entrysize",
                                                       "bookies_left", "open_ledgers", "batch")}}
    with LocalBookies(n, base_dir=base, conf={"autoRecoveryDaemonEnabled": "false"}) as lb, \
            BookKeeper(lb.metadata_uri, {"allowEmptyPassword": True}) as bk:
        victim = lb.bookies[0]
        payload = b"r" * args.entrysize
        held, open_handles = [], []
        t0 = time.monotonic()
        while len(held) < args.ledgers:
            h = bk.create_ledger(3, 2, 2)
            futures = [h.add_entry_async(payload) for _ in range(args.entries)]
            for f in futures:
                f.result(60)
            if victim not in h.metadata.last_ensemble:
                h.close()
                continue
            held.append(h.ledger_id)
            if len(held) > args.ledgers - args.open_ledgers:
                open_handles.append(h)
            else:
                h.close()
            if len(held) % 25 == 0:
                emit(f"written: {len(held)}/{args.ledgers} ledgers on {victim}")
        result["write_seconds"] = round(time.monotonic() - t0, 2)
        lb.kill(0)
        emit(f"{victim} killed; recover ...")
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "bookie", "shell", "recover", victim, "--json",
                              "--batch", str(args.batch), "--metadata", lb.metadata_uri,
                              "--timeout-s", "30"], capture_output=True, text=True)
        command_s = time.monotonic() - t0
        if out.returncode not in (0, 1):
            emit(out.stderr[-2000:])
        doc = orjson.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
        seconds = doc.get("copy_seconds") or command_s
        copied = doc.get("copied_bytes", 0)
        still = sum(1 for lid in held
                    if any(victim in ens for _, ens in bk.ledger_metadata(lid).fragments))
    result.update({
        "ledgers": len(held), "healed": len(doc.get("healed", [])),
        "failed": len(doc.get("failed", [])) + len(doc.get("lost", [])), "still_named": still,
        "seconds": round(seconds, 2), "command_s": round(command_s, 2),
        "ledgers_per_s": round(len(held) / max(seconds, 1e-9), 1),
        "copied_mb": round(copied / 1e6, 2), "mb_per_s": round(copied / 1e6 / max(seconds, 1e-9), 2),
        "load_after": os.getloadavg()})
    return result
