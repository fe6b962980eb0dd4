"""``bookie shell verifyledger LEDGER [--bookie ID]``: every replica's copy of every entry of a
closed verifiable ledger checked against the Merkle root in its metadata (issue 43).

Exit status: 0 when every copy matches; 1 when some do not (one line per bookie and entry, on
stdout, or a JSON document with ``--json``), also when no choice of copies makes up the root;
2 for a ledger that is not verifiable or not closed (and any other refusal: one line).
"""

from __future__ import annotations

import argparse
import logging

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import (add_ledger_id_argument, client_keys,
                                             ledger_id_of, metadata_uri, print_json, zk_security)
from bookie.appliance.privileges import run_as_store_owner
from bookie.client import options
from bookie.client.errors import BookKeeperError, TamperedEntryError
from bookie.metadata import MetadataError, NoSuchLedgerError, open_metadata


def register(commands, metadata_command) -> None:
    p = metadata_command("verifyledger", "Check every replica's copy of every entry of a closed "
                         "verifiable ledger against its Merkle root (exit 0: all match, 1: "
                         "some do not, 2: not verifiable or not closed).", _verifyledger)
    add_ledger_id_argument(p)
    p.add_argument("--bookie", metavar="ID", default=None,
                   help="check only this bookie's copies")
    p.add_argument("--password", default=None, help="the ledger's password (default: the "
                   "client's passwd key)")
    options.add_arguments(p)


def _verifyledger(args: argparse.Namespace) -> int:
    from bookie.client import BookKeeper  # lazy: zmq
    ledger_id = ledger_id_of(args, "verifyledger")
    uri, keys = metadata_uri(args), client_keys(args)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    run_as_store_owner(uri, "verifyledger")
    try:
        store = open_metadata(uri, timeout_s=args.timeout_s, zk_security=zk_security(args))
        try:
            meta, _ = store.read_ledger(ledger_id)
        finally:
            store.close()
    except NoSuchLedgerError:
        raise CliError(f"ledger {ledger_id} does not exist") from None
    except MetadataError as e:
        raise CliError(str(e)) from None
    if not meta.verifiable:
        raise CliError(f"ledger {ledger_id} is not verifiable: it has no Merkle root to check")
    if not meta.is_closed:
        raise CliError(f"ledger {ledger_id} is {meta.state.value}, not closed: its Merkle root "
                       f"is written when it closes")
    if args.bookie is not None and not any(args.bookie in ens for _, ens in meta.fragments):
        raise CliError(f"bookie {args.bookie} holds no fragment of ledger {ledger_id}")
    password = args.password.encode() if args.password is not None else None
    try:
        with BookKeeper(uri, keys) as bk:
            lh = bk.open_ledger(ledger_id, digest=meta.digest_type, password=password,
                                recovery=False)
            bad = lh.replica_check(args.bookie)
    except TamperedEntryError as e:
        print(str(e))
        return 1
    except BookKeeperError as e:
        raise CliError(str(e)) from None
    rows = [{"entry_id": e, "bookie": b, "problem": why}
            for e, by_bookie in sorted(bad.items()) for b, why in sorted(by_bookie.items())]
    if args.json:
        print_json({"ledger_id": ledger_id, "merkle_root": meta.merkle_root,
                    "tree_size": meta.tree_size, "bookie": args.bookie, "mismatches": rows})
    elif rows:
        for row in rows:
            print(f"ledger {ledger_id} entry {row['entry_id']} on bookie {row['bookie']}: "
                  f"{row['problem']}")
    else:
        where = f"bookie {args.bookie}'s copies" if args.bookie else "every replica's copy"
        print(f"ledger {ledger_id}: {where} of its {meta.tree_size} entries match its Merkle "
              f"root {meta.merkle_root}")
    return 1 if rows else 0
