"""``bookie run``: one bookie in the foreground."""

from __future__ import annotations

import argparse

from bookie.appliance.errors import CliError
from bookie.workers.config import BookieConfig, ConfigError, keys_help, parse_overrides


def register(sub) -> None:
    p = sub.add_parser(
        "run", help="run one bookie in the foreground (supervisor + journal/add/read/gc workers)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one bookie in the foreground until SIGTERM or Ctrl-C.",
        epilog="configuration keys (file: key=value per line; --set key=value overrides):\n"
               + keys_help()
               + "\n\nsignals: SIGTERM/SIGINT stop cleanly; SIGUSR1 forces read-only, SIGUSR2 undoes it."
               + "\nexit status: 0 stopped on request; 1 failure; 2 refused to start, in one line "
                 "saying why, with nothing left registered or running (bad configuration, "
                 "directory layout or cookie, directories in use by another bookie, a port in "
                 "use, no metadata store at metadataServiceUri, its bookie id registered by "
                 "another live process); 3 corrupt journal; 4 journal write/fdatasync failed "
                 "(disk error)."
               + "\nbookiePort=0: the port the directories were stamped with, else a free one.")
    p.add_argument("--conf", metavar="FILE", help="configuration file (key=value lines)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one configuration key (repeatable)")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from bookie.appliance.supervisor import run_bookie

    try:
        conf = BookieConfig.load(args.conf, parse_overrides(args.set))
    except ConfigError as e:
        raise CliError(str(e)) from None
    return run_bookie(conf)
