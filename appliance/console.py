"""The ``bookie`` console script: ``bookie.appliance.cli.main``, with Ctrl-C at any moment
(even while the command's modules are still being imported) ending in exit status 130 and no
traceback."""

from __future__ import annotations


def main() -> int:
    try:
        from bookie.appliance.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return 130
