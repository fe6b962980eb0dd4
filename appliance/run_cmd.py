"""``bookie run``: one bookie in the foreground."""

from __future__ import annotations

import argparse
import os

from bookie.appliance.errors import CliError
from bookie.workers import logs
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
                 "directory layout or cookie, its key changed against its cookie ('bookie shell "
                 "rotatekey'), directories in use by another bookie, a port in use after 10 s "
                 "of retries (its holder named when /proc tells), no metadata store at metadataServiceUri, its bookie id registered by "
                 "another live process); 3 corrupt journal; 4 journal write/fdatasync failed "
                 "(disk error)."
               + "\nbookiePort=0: the port the directories were stamped with, else a free one.")
    p.add_argument("--conf", metavar="FILE", help="configuration file (key=value lines)")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one configuration key (repeatable)")
    p.add_argument("--log-format", choices=logs.FORMATS, default=None,
                   help="log lines as logfmt (default; time level process: event key=value ...) "
                        "or one JSON object per line, for log shippers; the workers write the same")
    p.add_argument("--log-level", choices=tuple(logs.LEVELS), default=None,
                   help="lowest level written (default info; debug adds tracebacks)")
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from bookie.appliance.supervisor import run_bookie  # lazy: zmq

    from bookie.appliance.startchecks import (  # lazy: lmdb
        StartRefused, check_not_root_in_users_dirs)

    try:
        conf = BookieConfig.load(args.conf, parse_overrides(args.set))
        check_not_root_in_users_dirs(conf)  # before the directory lock leaves root's file there
    except (ConfigError, StartRefused) as e:
        raise CliError(str(e)) from None
    # The workers inherit the environment: one format for every process of the bookie.
    if args.log_format:
        os.environ[logs.FORMAT_ENV] = args.log_format
    if args.log_level:
        os.environ[logs.LEVEL_ENV] = args.log_level
    return run_bookie(conf)
