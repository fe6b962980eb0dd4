"""The ``bookie`` command: run, localbookie, shell, autorecovery, bench, version.

Each subcommand group lives in its own module and contributes its parser through a
``register(subparsers)`` function; this module assembles them and is the one place where the
lower layers' errors become one clear line on stderr and an exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from bookie import compiled
from bookie.appliance.errors import CliError
from bookie.metadata import MetadataError
from bookie.workers import logs
from bookie.workers.config import ConfigError
from bookie.storage.layout import LayoutError

# Each subcommand group's module, by the command it registers.  ``bookie run`` (every bookie's
# start, hundreds in a test suite) imports its own alone: not the shell, the client, the
# benchmarks or the test harness, which it never uses.
_GROUPS = {"run": "bookie.appliance.run_cmd", "localbookie": "bookie.appliance.localbookie",
           "shell": "bookie.appliance.shell.main",
           "autorecovery": "bookie.appliance.autorecovery_cmd",
           "bench": "bookie.bench.cli", "version": "bookie.appliance.cli"}

# A subcommand raises the error of the layer that refused; each is one line and exit status 2.
# Two more come from groups imported only for their own command (``_usage_errors``).
USAGE_ERRORS = (CliError, ConfigError, LayoutError, MetadataError)
_GROUP_USAGE_ERRORS = (("bookie.bench.cli", "BenchOptionError"),
                       ("bookie.testing.localbookies", "LocalBookieError"))


def _usage_errors() -> tuple[type[Exception], ...]:
    """USAGE_ERRORS and those of the imported groups (one not imported raised nothing)."""
    return USAGE_ERRORS + tuple(getattr(sys.modules[m], name) for m, name in _GROUP_USAGE_ERRORS
                                if m in sys.modules)


class _Parser(argparse.ArgumentParser):
    """Remembers, in the namespace, the innermost (sub)command parser that parsed: an option it
    does not know is reported with that command's usage (``bookie shell listbookies --bogus``
    shows listbookies' usage), not the top-level one.  Subparsers are of the parent's class."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, "_innermost_parser"):  # the innermost finishes first
            namespace._innermost_parser = self
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        innermost = vars(namespace).pop("_innermost_parser", self)
        if extras:
            innermost.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace


def version_line() -> str:
    """``bookie 0.1.0 (compiled: wire, client.digest, ...)`` or ``... (pure Python)``: the
    version and which of the compiled modules (bookie.compiled) this install runs."""
    from bookie import __version__  # lazy: importlib.metadata

    return f"bookie {__version__} ({compiled.describe()})"


def register(sub) -> None:
    """``bookie version``: ``--version``'s line and which modules run compiled."""
    p = sub.add_parser("version", help="print the version and which modules run compiled")
    p.set_defaults(func=lambda args: print(version_line()) or 0)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``bookie`` parser: every command's, or when ``argv`` names one (its first word) only
    that command's (the same parser for it, without importing the others)."""
    from bookie import __version__  # lazy: importlib.metadata

    parser = _Parser(
        prog="bookie",
        description="A BookKeeper-style bookie appliance: run a bookie, a local ensemble, "
                    "the admin shell and the benchmarks.")
    parser.add_argument("--version", action="version", version=f"bookie {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    named = _GROUPS.get(argv[0]) if argv else None
    for module in [named] if named else _GROUPS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logs.install_logging()  # the client's records (bookie.client) as the bookie's log lines
    logs.install_library_logging()  # and kazoo's, in the same format (--log-format json too)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except _usage_errors() as e:
        print(f"bookie {args.command}: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
