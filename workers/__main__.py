"""Entry point of a worker process: ``python -m bookie.workers ROLE --conf F --run-dir D``.

The supervisor starts each worker with fork+exec, so nothing (LMDB environments, ZeroMQ
contexts, threads) is inherited from it: each worker opens its own after it starts.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import setproctitle

from bookie.workers import logs
from bookie.workers.config import BookieConfig
from bookie.workers.client_sockets import raise_open_files_limit
from bookie.workers.common import WorkerContext
from bookie.workers.processes import wait_for_go
from bookie.storage.journal_set import index_of_role

ROLES = {
    "journal": "bookie.workers.journal_worker",
    "add": "bookie.workers.add_worker",
    "read": "bookie.workers.read_worker",
    "gc": "bookie.workers.gc_worker",
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bookie.workers")
    p.add_argument("role", help=f"{', '.join(sorted(ROLES))}, or journal-N (the N-th of "
                   f"journalDirectories)")
    p.add_argument("--conf", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--go-fd", type=int, help="wait for a byte on this descriptor before opening "
                   "anything (the supervisor launches workers early so their imports overlap); "
                   "end of file instead: exit at once")
    args = p.parse_args(argv)
    is_journal = index_of_role(args.role) is not None
    if args.role not in ROLES and not is_journal:
        p.error(f"unknown role {args.role!r}")
    conf = BookieConfig.load(args.conf, check_dirs=False)
    ctx = WorkerContext(args.role, conf, args.run_dir, args.ready_fd)
    setproctitle.setproctitle(ctx.name)  # its name in ps from the start, waiting or not
    module = importlib.import_module(ROLES["journal" if is_journal else args.role])
    # The metrics library as well, while the workers before this one start: its import (some
    # 50 ms) came with the first metric, after the go, and so lay on the start's
    # sequential path.  Its multiprocess mode reads PROMETHEUS_MULTIPROC_DIR, set since exec.
    importlib.import_module("prometheus_client")
    if args.go_fd is not None and not wait_for_go(args.go_fd):
        return 0
    logs.install_library_logging()  # kazoo's records as log lines of the worker's format
    os.umask(0o077)  # as the supervisor's: what a worker creates is the bookie user's alone
    raise_open_files_limit()  # client connections are descriptors (capped: maxClientConnections)
    ctx.start()
    try:
        return int(module.run(ctx) or 0)
    except Exception as e:  # one line for the log; the traceback at debug level
        ctx.log_exception("fatal", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
