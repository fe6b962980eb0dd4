"""The ``bookie`` command: run, localbookie, shell, autorecovery, bench.

Each subcommand group lives in its own module and contributes its parser through a
``register(subparsers)`` function; this module assembles them and is the one place where the
lower layers' errors become one clear line on stderr and an exit status.
"""

from __future__ import annotations

import argparse
import sys

from bookie import __version__
from bookie.appliance import autorecovery_cmd, localbookie, run_cmd, shell
from bookie.appliance.errors import CliError
from bookie.bench import cli as bench_cli
from bookie.metadata import MetadataError
from bookie.testing.localbookies import LocalBookieError
from bookie.workers import logs
from bookie.workers.config import ConfigError
from bookie.storage.layout import LayoutError

_GROUPS = (run_cmd, localbookie, shell, autorecovery_cmd, bench_cli)

# A subcommand raises the error of the layer that refused; each is one line and exit status 2.
USAGE_ERRORS = (CliError, bench_cli.BenchOptionError, ConfigError, LayoutError, MetadataError,
                LocalBookieError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookie",
        description="A BookKeeper-style bookie appliance: run a bookie, a local ensemble, "
                    "the admin shell and the benchmarks.")
    parser.add_argument("--version", action="version", version=f"bookie {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.install_logging()  # the client's records (bookie.client) as the bookie's log lines
    logs.install_library_logging()  # and kazoo's, in the same format (--log-format json too)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except USAGE_ERRORS as e:
        print(f"bookie {args.command}: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
