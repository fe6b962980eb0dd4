"""``bookie shell triggergc``: ask a running bookie on this host for a GC pass now.

    bookie shell triggergc [--conf FILE] [--set KEY=VALUE] [--major | --minor] [--json]

The bookie is found through its directories (the ``bookie.lock`` its supervisor holds beside
the journal's ``current/``: the kernel's flock says whether one runs, the record names its run
directory, used only if it is a real directory of the directories' owner), so it works without
the HTTP admin API.  Started as root, the tool becomes that owner first.  Under systemd the run
directory is in the unit's ``RuntimeDirectory=`` (/run/bookie), which the shell sees; the GC worker starts the
pass within 100 ms.  ``--major`` / ``--minor`` also run that compaction now (BookKeeper's
``forceMajor`` / ``forceMinor``).  Progress is in the bookie's log (``compaction started``,
``compacted``, ``compaction done``) and its metrics (``bookie_compaction_*``).
"""

from __future__ import annotations

import argparse
import os
import stat

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import add_bookie_conf_arguments
from bookie.appliance.privileges import owner_of, run_as_owner
from bookie.storage.dirlock import held_record
from bookie.storage.layout import LayoutError, all_dirs
from bookie.workers.config import BookieConfig, parse_overrides


def register(commands) -> None:
    p = commands.add_parser("triggergc", help="Start a GC pass (and a compaction) on the bookie "
                            "running on these directories now.",
                            description="Ask the bookie running on these directories (found "
                                        "through its directory lock) for a GC pass now; with "
                                        "--major or --minor also that compaction. Progress is "
                                        "in the bookie's log and bookie_compaction_* metrics.")
    add_bookie_conf_arguments(p)
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--major", action="store_true", help="run a major compaction too")
    kind.add_argument("--minor", action="store_true", help="run a minor compaction too")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=_triggergc)


def running_bookie(journal_dir: str, owner: int) -> dict:
    """The lock record of the bookie running on ``journal_dir`` ({"pid", "run_dir", ...}),
    checked: a process holds the directory lock now (the kernel's flock, not the record's
    word), and the run directory it names is a real directory (no link) of ``owner`` that
    only it may write.

    Raises:
        CliError: no bookie runs there, or its record names a run directory not to be trusted.
    """

    try:
        record = held_record(journal_dir)
    except LayoutError as e:
        raise CliError(str(e)) from None
    if record is None:
        raise CliError(f"no bookie is running on {journal_dir}")
    pid, run_dir = record.get("pid"), record.get("run_dir")
    if not (isinstance(pid, int) and pid > 0 and isinstance(run_dir, str)
            and os.path.isabs(run_dir)):
        raise CliError(f"the bookie on {journal_dir} is starting or stopping (its lock names no "
                       f"run directory yet); try again")
    try:
        st = os.lstat(run_dir)
    except OSError as e:
        raise CliError(f"the run directory {run_dir} of the bookie on {journal_dir}: "
                       f"{e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner or st.st_mode & 0o022:
        raise CliError(f"the run directory {run_dir} named by {journal_dir}'s lock is not a "
                       f"directory of the bookie's user that only it may write: not used")
    return record


def _triggergc(args: argparse.Namespace) -> int:
    from bookie.workers.gc_worker import request_gc  # lazy: lmdb

    conf = BookieConfig.load(args.conf, parse_overrides(args.set), check_dirs=False)
    run_as_owner(all_dirs(conf), "triggergc")  # root asks as the bookie's user, nothing more
    owner, _ = owner_of(all_dirs(conf))
    record = running_bookie(conf.journal_dir, owner)
    if not conf.metadata_uri:
        raise CliError("this bookie has no metadata store: its GC never deletes anything")
    try:
        request_gc(record["run_dir"], major=args.major, minor=args.minor)
    except OSError as e:
        raise CliError(f"could not ask bookie pid {record['pid']} for a GC pass: "
                       f"{e.strerror or e}") from None
    kind = "major" if args.major else "minor" if args.minor else ""
    if args.json:
        print(orjson.dumps({"gcRequested": True, "pid": record["pid"],
                            "compaction": kind or None}).decode())
    else:
        print(f"triggergc: asked bookie pid {record['pid']} for a GC pass"
              + (f" with a {kind} compaction" if kind else ""))
    return 0
