"""``bookie shell setrack``: an operator sets (or removes) a bookie's location for placement.

    bookie shell setrack BOOKIE /REGION/RACK --metadata URI
    bookie shell setrack BOOKIE --delete --metadata URI

The location is kept in the metadata store (``bookie.client.metadata.LOCATIONS``), one node
per bookie id, and wins over the bookie's own ``bookieLocation``; clients with
``ensemblePlacementPolicy=rackaware`` or ``regionaware`` read it before each creation and
ensemble change (docs/client.md, "Placement by rack and region").  The bookie need not be
running, but the cluster must know its id (appliance/shell/known.py: registered, a cookie, or
in a ledger's ensemble); a bookie not yet started takes its ``bookieLocation`` instead.  A
malformed location or an unknown id is one line and exit status 2.
"""

from __future__ import annotations

import argparse

from bookie.appliance.errors import CliError
from bookie.appliance.shell.known import refused, require_bookies
from bookie.appliance.shell.registry import print_json, with_store
from bookie.metadata import NoSuchNodeError, NodeExistsError
from bookie.metadata.store import check_bookie_id
from bookie.properties import check_location


def register(commands, metadata_command) -> None:
    p = metadata_command("setrack", "Set (or with --delete remove) a bookie's location "
                         "/REGION/RACK for rack- and region-aware placement.", _setrack)
    p.add_argument("bookie", metavar="BOOKIE", help="bookie id: host:port, or its bookieId")
    p.add_argument("location", metavar="/REGION/RACK", nargs="?", default=None)
    p.add_argument("--delete", action="store_true",
                   help="remove the location set here (the bookie's bookieLocation applies)")


def _setrack(args: argparse.Namespace) -> int:
    from bookie.client.metadata import LOCATIONS  # lazy: numpy

    if args.delete == (args.location is not None):
        raise CliError("give a location /REGION/RACK, or --delete (not both)")
    try:
        check_bookie_id(args.bookie)
    except ValueError as e:
        raise CliError(f"BOOKIE: {e}") from None
    if args.location is not None and check_location(args.location):
        raise CliError(f"location {args.location!r}: {check_location(args.location)}")
    path = f"{LOCATIONS}/{args.bookie}"

    def body(store) -> int:
        if args.delete:
            try:
                store.delete(path)
            except NoSuchNodeError:
                pass
        else:
            with refused("setrack"):
                require_bookies(store, [args.bookie])
            data = args.location.encode()
            try:
                store.create(path, data)
            except NodeExistsError:
                store.set(path, data, None)
        if args.json:
            print_json({"bookie": args.bookie, "location": args.location})
        else:
            print(f"setrack: {args.bookie}: " + (f"location {args.location}" if args.location
                                                 else "location removed"))
        return 0
    return with_store(args, body)
