"""``python -m bookie.autorecovery --conf F [--ready-fd N]``: the supervisor's autorecovery
worker (``bookie autorecovery --conf F`` runs the same loop alone)."""

from __future__ import annotations

import argparse
import sys

from bookie.workers.config import BookieConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bookie.autorecovery")
    p.add_argument("--conf", required=True)
    p.add_argument("--ready-fd", type=int)
    args = p.parse_args(argv)
    conf = BookieConfig.load(args.conf, check_dirs=False)
    from bookie.workers import logs
    logs.install_library_logging()  # kazoo's records as log lines of the bookie's format
    from bookie.autorecovery.worker import main as run
    return run(conf, args.ready_fd)


if __name__ == "__main__":
    sys.exit(main())
