"""``python -m bookie.autorecovery --conf F [--ready-fd N] [--go-fd N]``: the supervisor's autorecovery
worker (``bookie autorecovery --conf F`` runs the same loop alone)."""

from __future__ import annotations

import argparse
import sys

from bookie.workers.config import BookieConfig
from bookie.workers.processes import wait_for_go


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bookie.autorecovery")
    p.add_argument("--conf", required=True)
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--go-fd", type=int, help="wait for a byte on this descriptor before starting "
                   "(end of file instead: exit at once)")
    args = p.parse_args(argv)
    from bookie.autorecovery.worker import main as run  # lazy: zmq
    if args.go_fd is not None and not wait_for_go(args.go_fd):
        return 0
    conf = BookieConfig.load(args.conf, check_dirs=False)
    from bookie.workers import logs  # lazy: orjson
    logs.install_library_logging()  # kazoo's records as log lines of the bookie's format
    return run(conf, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
