"""``bookie shell triggergc``: ask a running bookie on this host for a GC pass now.

    bookie shell triggergc [--conf FILE] [--set KEY=VALUE] [--major | --minor] [--json]

The bookie is found through its directories (the ``bookie.lock`` its supervisor writes beside
the journal's ``current/``), so it works without the HTTP admin API; the GC worker starts the
pass within 100 ms.  ``--major`` / ``--minor`` also run that compaction now (BookKeeper's
``forceMajor`` / ``forceMinor``).  Progress is in the bookie's log (``compaction started``,
``compacted``, ``compaction done``) and its metrics (``bookie_compaction_*``).
"""

from __future__ import annotations

import argparse
import os

import orjson

from bookie.appliance.errors import CliError


def register(commands) -> None:
    p = commands.add_parser("triggergc", help="Start a GC pass (and a compaction) on the bookie "
                            "running on these directories now.",
                            description="Ask the bookie running on these directories (found "
                                        "through its directory lock) for a GC pass now; with "
                                        "--major or --minor also that compaction. Progress is "
                                        "in the bookie's log and bookie_compaction_* metrics.")
    p.add_argument("--conf", metavar="FILE", default=None, help="bookie configuration file")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one configuration key (repeatable)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--major", action="store_true", help="run a major compaction too")
    kind.add_argument("--minor", action="store_true", help="run a minor compaction too")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=_triggergc)


def running_bookie(journal_dir: str) -> dict:
    """The lock record of the bookie running on ``journal_dir`` ({"pid", "run_dir", ...}).

    Raises:
        CliError: no bookie runs there.
    """
    from bookie.storage.dirlock import LOCK_FILE

    path = os.path.join(journal_dir, LOCK_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
        record = orjson.loads(raw) if raw.strip() else {}
    except (OSError, orjson.JSONDecodeError):
        record = {}
    pid = record.get("pid") if isinstance(record, dict) else None
    run_dir = record.get("run_dir") if isinstance(record, dict) else None
    alive = isinstance(pid, int) and pid > 0 and os.path.exists(f"/proc/{pid}")
    if not (alive and isinstance(run_dir, str) and os.path.isdir(run_dir)):
        raise CliError(f"no bookie is running on {journal_dir}")
    return record


def _triggergc(args: argparse.Namespace) -> int:
    from bookie.workers.config import BookieConfig, parse_overrides
    from bookie.workers.gc_worker import request_gc

    conf = BookieConfig.load(args.conf, parse_overrides(args.set), check_dirs=False)
    record = running_bookie(conf.journal_dir)
    if not conf.metadata_uri:
        raise CliError("this bookie has no metadata store: its GC never deletes anything")
    try:
        request_gc(record["run_dir"], major=args.major, minor=args.minor)
    except OSError as e:
        raise CliError(f"could not ask bookie pid {record['pid']} for a GC pass: {e}") from None
    kind = "major" if args.major else "minor" if args.minor else ""
    if args.json:
        print(orjson.dumps({"gcRequested": True, "pid": record["pid"],
                            "compaction": kind or None}).decode())
    else:
        print(f"triggergc: asked bookie pid {record['pid']} for a GC pass"
              + (f" with a {kind} compaction" if kind else ""))
    return 0
