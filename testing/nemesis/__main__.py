"""``python -m bookie.testing.nemesis``: run the fault-injection harness from the command line.

Exit status 0 when every round's check passed, 1 on a violation (the summary ends with the
command that replays the seed), 2 on bad arguments or a harness that cannot run here.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys

from bookie.testing.nemesis.network import Network, NetworkError
from bookie.testing.nemesis.runner import Options, round_schedule, run
from bookie.testing.nemesis.schedule import LIFECYCLE_KINDS


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bookie.testing.nemesis",
                                description="Seeded fault injection against local bookies, "
                                "with a checker of every acknowledged entry.")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault schedule "
                   "(default: random, printed)")
    p.add_argument("--time", type=float, default=60.0, dest="time_s",
                   help="seconds to run (rounds keep starting while one fits; default 60)")
    p.add_argument("--round", type=float, default=15.0, dest="round_s",
                   help="seconds of faults per round before the check (default 15)")
    p.add_argument("--bookies", type=int, default=5, help="number of bookies (default 5)")
    p.add_argument("--metadata", choices=("lmdb", "zk"), default="lmdb",
                   help="embedded LMDB store or a ZooKeeper server (with its faults)")
    p.add_argument("--writers", type=int, default=3, help="writer processes (default 3)")
    p.add_argument("--disk", action="store_true", help="full-disk faults (tmpfs; needs root)")
    p.add_argument("--network", action="store_true", help="network namespaces and partitions, "
                   "packet loss and slow links (needs root, ip, nft, tc)")
    p.add_argument("--lifecycle", action="store_true", help="lifecycle faults too: compactions, "
                   "index rebuilds, bookies lost for good and decommissioned (autorecovery on), "
                   "a squatting client, disks filling to read-only (tmpfs: root)")
    p.add_argument("--dir", default=None, help="keep everything under this directory")
    p.add_argument("--keep", action="store_true", help="keep logs and histories after a pass")
    p.add_argument("--print-schedule", type=int, metavar="ROUNDS", default=None,
                   help="print the faults of the first ROUNDS rounds for these options and exit")
    args = p.parse_args(argv)
    if args.bookies < 3:
        p.error("--bookies must be at least 3")
    if args.writers < 1 or args.time_s <= 0 or args.round_s < 5:
        p.error("--writers must be >= 1, --time > 0 and --round >= 5")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    opts = Options(seed=seed, time_s=args.time_s, round_s=args.round_s, bookies=args.bookies,
                   metadata=args.metadata, writers=args.writers, disk=args.disk,
                   network=args.network, base_dir=args.dir, keep=args.keep,
                   lifecycle=args.lifecycle)
    if args.print_schedule is not None:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
        # the lifecycle kinds owed at each round, as if every fault scheduled so far happened
        owed = list(LIFECYCLE_KINDS) if args.lifecycle else []
        for round_no in range(args.print_schedule):
            print(f"round {round_no}:")
            faults = round_schedule(opts, round_no, owed)
            for fault in faults:
                print(f"  {fault.describe()}")
            owed = [k for k in owed if all(f.kind != k for f in faults)]
        return 0
    print(f"nemesis: seed {seed}; replay with: {opts.replay_command()}", flush=True)
    network = None
    if args.network:
        try:
            network = Network(args.bookies, with_zookeeper=args.metadata == "zk")
            network.setup()
            network.enter_control()
        except NetworkError as exc:
            print(f"nemesis: network faults cannot run here: {exc}", file=sys.stderr)
            if network is not None:
                network.teardown()
            return 2
    try:
        summary = run(opts, network=network)
    finally:
        if network is not None:
            network.teardown()
    print(summary.text(), flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
