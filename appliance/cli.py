"""The ``bookie`` command: run, localbookie, shell, bench.

Each subcommand group lives in its own module and contributes its parser through a
``register(subparsers)`` function; this module only assembles them and maps errors to one clear
line on stderr and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules contributing a register(subparsers) hook; a missing one is a bug and fails loudly.
_GROUPS = (
    "bookie.appliance.run_cmd",
    "bookie.appliance.localbookie",
    "bookie.appliance.shell",
    "bookie.bench.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookie",
        description="A BookKeeper-style bookie appliance: run a bookie, a local ensemble, "
                    "the admin shell and the benchmarks.")
    from bookie import __version__
    parser.add_argument("--version", action="version", version=f"bookie {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _GROUPS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except CliError as e:
        print(f"bookie {args.command}: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


class CliError(Exception):
    """An error a person can act on; printed as one line, exit status 2."""


if __name__ == "__main__":
    sys.exit(main())
