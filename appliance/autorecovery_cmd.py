"""``bookie autorecovery --conf F``: the autorecovery worker alone, outside a bookie (for hosts
that run no bookie, or bookies run with ``autoRecoveryDaemonEnabled=false``)."""

from __future__ import annotations

from typing import Any

from bookie.appliance.errors import CliError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "autorecovery", help="run the autorecovery worker (auditor election, replication) alone",
        description="Run the autorecovery worker alone: it stands in the auditor election and "
                    "heals under-replicated ledgers (docs/autorecovery.md).  Stops on SIGTERM "
                    "or Ctrl-C.")
    p.add_argument("--conf", metavar="FILE", help="bookie configuration file (its "
                   "metadataServiceUri and autorecovery keys)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from bookie.autorecovery.worker import main  # lazy: zmq
    from bookie.workers.config import BookieConfig, parse_overrides  # lazy: orjson

    conf = BookieConfig.load(args.conf, parse_overrides(args.set), check_dirs=False)
    if not conf.metadata_uri:
        raise CliError("no metadata store: set metadataServiceUri (or zkServers) in --conf")
    return main(conf, name=f"bookie[{conf.bookie_port}] autorecovery")
