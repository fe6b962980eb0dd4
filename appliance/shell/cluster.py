"""``bookie shell`` verbs over the cluster's metadata, with BookKeeper's names and spellings:

    whatisinstanceid                         the store's instance id
    initnewcluster                           create and initialise a new store (refused if one
                                             is there: nukeexistingcluster first)
    nukeexistingcluster -instanceid ID | -force
                                             wipe every ledger, cookie and mark (refused while
                                             bookies are registered); the store stays
                                             initialised, empty, under a new instance id
    lostbookierecoverydelay -get | -set N    the cluster's lostBookieRecoveryDelay (seconds):
                                             set in the store, every auditor uses it over its
                                             own configuration from its next look
    queryautorecoverystatus [-verbose]       ledgers being re-replicated now (and by whom)
    listbookies [-rw | -ro | -a]             registered bookies: id, address, location
                                             (registered in ``main.py``, shown here)
    endpointinfo -b BOOKIE_ID                a registered bookie's endpoints
    cookie_list                              the bookies that have a cookie in the store
    cookie_get BOOKIE_ID                     one bookie's cookie
    cookie_delete BOOKIE_ID -force           remove one bookie's cookie from the store

Each takes ``--metadata URI`` (BookKeeper's ``;`` between ZooKeeper hosts accepted) or
``--conf FILE``, and ``--json``.  A refusal is one line, exit status 2; a verb that finds
nothing to show (no such cookie, bookie or instance) exits 1 with one line saying so.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import (
    metadata_uri, print_json, refuse_while_registered, store_exists, with_store)
from bookie.client.protocol.placement import DEFAULT_LOCATION
from bookie.client.resolver import address_of
from bookie.metadata import CookieNotFoundError, NoSuchNodeError
from bookie.metadata.bookie_ids import split_address
from bookie.metadata.store import COOKIES, check_bookie_id
from bookie.metadata.underreplication import UnderReplication
from bookie.metadata.uri import parse_uri


def register(commands, metadata_command: Callable) -> None:
    metadata_command("whatisinstanceid", "Print the metadata store's instance id.",
                     _whatisinstanceid)
    metadata_command("initnewcluster", "Create and initialise a new metadata store (refused "
                     "when one is there: nukeexistingcluster wipes it).", _initnewcluster)
    p = metadata_command("nukeexistingcluster", "Wipe the metadata store: every ledger, cookie "
                         "and under-replication mark (refused while bookies are registered). "
                         "Name the instance id to wipe, or -force.", _nukeexistingcluster)
    p.add_argument("--instance-id", "-instanceid", metavar="ID", default=None,
                   help="the instance id of the store to wipe (whatisinstanceid)")
    p.add_argument("--force", "-force", action="store_true",
                   help="wipe without naming the instance id")
    p.add_argument("--zk-ledgers-root-path", "-zkledgersrootpath", metavar="PATH", default=None,
                   help="BookKeeper's spelling of the root: must be the --metadata URI's")
    p.add_argument("--force-while-bookies-registered", action="store_true",
                   help=argparse.SUPPRESS)

    p = metadata_command("lostbookierecoverydelay", "Get or set the cluster's "
                         "lostBookieRecoveryDelay (seconds before the auditor re-replicates a "
                         "lost bookie's ledgers).", _lostbookierecoverydelay)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--get", "-get", action="store_true")
    group.add_argument("--set", "-set", dest="set_delay", type=int, metavar="SECONDS")

    p = metadata_command("queryautorecoverystatus", "List the ledgers being re-replicated now "
                         "and the worker healing each.", _queryautorecoverystatus)
    p.add_argument("--verbose-status", "-verbose", action="store_true",
                   help="also the bookies each ledger misses")

    p = metadata_command("endpointinfo", "Print a registered bookie's endpoints (add and read "
                         "ports, host, pid).", _endpointinfo)
    p.add_argument("--bookie-id", "-b", "-bookieid", dest="bookie_id", metavar="BOOKIE_ID",
                   required=True)

    metadata_command("cookie_list", "List the bookies that have a cookie in the store.",
                     _cookie_list)
    p = metadata_command("cookie_get", "Print one bookie's cookie from the store.", _cookie_get)
    p.add_argument("bookie_id", metavar="BOOKIE_ID")
    p = metadata_command("cookie_delete", "Remove one bookie's cookie from the store (the "
                         "bookie must then be formatted to join again).", _cookie_delete)
    p.add_argument("bookie_id", metavar="BOOKIE_ID")
    p.add_argument("--force", "-force", action="store_true", help="required: it cannot be undone")


# -- instance ----------------------------------------------------------------------------------

def _whatisinstanceid(args) -> int:
    def body(store) -> int:
        instance = store.instance_id()
        if args.json:
            print_json({"instance_id": instance})
        elif instance:
            print(instance)
        else:
            print("the store has no instance id", file=sys.stderr)
        return 0 if instance else 1
    return with_store(args, body)


def _initnewcluster(args) -> int:
    if store_exists(args):
        raise CliError("a metadata store is already initialised there; 'bookie shell "
                       "nukeexistingcluster' wipes it, or use it as it is")

    def body(store) -> int:
        if store.has_data():
            raise CliError("the store holds data already; 'bookie shell nukeexistingcluster' "
                           "wipes it first")
        instance = store.instance_id()
        if args.json:
            print_json({"initialised": True, "instance_id": instance})
        else:
            print(f"new cluster initialised (instance {instance})")
        return 0
    return with_store(args, body, create=True)


def _nukeexistingcluster(args) -> int:
    if args.zk_ledgers_root_path is not None:
        root = getattr(parse_uri(metadata_uri(args)), "root", None)
        if root != args.zk_ledgers_root_path:
            raise CliError(f"-zkledgersrootpath {args.zk_ledgers_root_path} is not the store's "
                           f"root ({root or 'an embedded store has none'})")
    if not args.instance_id and not args.force:
        raise CliError("name the store to wipe: -instanceid ID (whatisinstanceid prints it), "
                       "or -force")

    def body(store) -> int:
        instance = store.instance_id()
        if args.instance_id and args.instance_id != instance:
            raise CliError(f"the store's instance id is {instance}, not {args.instance_id}; "
                           f"nothing wiped")
        refuse_while_registered(store, args)
        store.format(force=True)
        if args.json:
            print_json({"wiped": instance, "instance_id": store.instance_id()})
        else:
            print(f"cluster {instance} wiped; the store is empty (instance "
                  f"{store.instance_id()})")
        return 0
    return with_store(args, body)


# -- autorecovery ------------------------------------------------------------------------------

def _lostbookierecoverydelay(args) -> int:
    if args.set_delay is not None and args.set_delay < 0:
        raise CliError(f"lostBookieRecoveryDelay must be 0 or more seconds, not {args.set_delay}")

    def body(store) -> int:
        ur = UnderReplication(store)
        if args.set_delay is not None:
            ur.set_recovery_delay_s(args.set_delay)
        delay = ur.recovery_delay_s()
        if args.json:
            print_json({"lostBookieRecoveryDelay": delay})
        elif args.set_delay is not None:
            print(f"lostBookieRecoveryDelay set to {delay} s for every auditor")
        elif delay is None:
            print("lostBookieRecoveryDelay: not set in the store; each auditor uses its "
                  "bookie's configured lostBookieRecoveryDelay")
        else:
            print(f"lostBookieRecoveryDelay: {delay} s")
        return 0
    return with_store(args, body)


def _queryautorecoverystatus(args) -> int:

    def body(store) -> int:
        ur = UnderReplication(store)
        marks = ur.marks()
        healing = []
        for ledger_id in sorted(marks):
            holder = ur.lock_holder(ledger_id)
            if holder:
                healing.append({"ledger_id": ledger_id, "worker": holder,
                                "missing": marks[ledger_id]})
        if args.json:
            print_json({"enabled": ur.enabled(), "rereplicating": healing})
            return 0
        if not ur.enabled():
            print("autorecovery is disabled ('bookie shell autorecovery --enable')")
        if not healing:
            print("no ledger is being re-replicated")
        for row in healing:
            line = f"ledger {row['ledger_id']}: being re-replicated by {row['worker']}"
            if args.verbose_status:
                line += f" (missing {', '.join(row['missing'])})"
            print(line)
        return 0
    return with_store(args, body)


def _endpointinfo(args) -> int:

    try:
        check_bookie_id(args.bookie_id)
    except ValueError as e:
        raise CliError(str(e)) from None

    def body(store) -> int:
        info = store.bookie_info(args.bookie_id)
        if info is None:
            print(f"endpointinfo: {args.bookie_id} is not registered (not running, or another "
                  f"id: 'bookie shell listbookies -a')", file=sys.stderr)
            return 1
        readonly = args.bookie_id in store.list_bookies(readonly=True)
        host = info.get("host") or args.bookie_id.rsplit(":", 1)[0]
        doc = {"bookie_id": args.bookie_id, "readonly": readonly, "host": host,
               "add_port": info.get("add_port"), "read_port": info.get("read_port"),
               "pid": info.get("pid")}
        if args.json:
            print_json(doc)
            return 0
        print(f"bookie {args.bookie_id} ({'read-only' if readonly else 'writable'})")
        print(f"  adds:  tcp://{host}:{doc['add_port']}")
        print(f"  reads: tcp://{host}:{doc['read_port']}")
        if doc["pid"]:
            print(f"  pid:   {doc['pid']}")
        return 0
    return with_store(args, body)


# -- cookies -----------------------------------------------------------------------------------

def _cookie_list(args) -> int:

    def body(store) -> int:
        try:
            bookies = sorted(store.children(COOKIES))
        except NoSuchNodeError:
            bookies = []
        if args.json:
            print_json({"cookies": bookies})
            return 0
        if not bookies:
            print("no cookies in the store")
        for bookie_id in bookies:
            print(bookie_id)
        return 0
    return with_store(args, body)


def bookie_rows(store, bookies: list[str], readonly: bool) -> list[dict]:
    """One row per bookie: its id, its address now (from its registration; an address id is
    its own address) and its location (the one ``setrack`` set, else its ``bookieLocation``,
    else the default), as clients place ensembles on them."""
    from bookie.client.metadata import ClientStore  # lazy: numpy
    locations = ClientStore(store, own=False).locations(bookies)
    rows = []
    for bookie_id in bookies:
        address = address_of(store.bookie_info(bookie_id)) or split_address(bookie_id)
        rows.append({"bookie_id": bookie_id,
                     "address": f"{address[0]}:{address[1]}" if address else None,
                     "location": locations.get(bookie_id) or DEFAULT_LOCATION,
                     "readonly": readonly})
    return rows


def listbookies(args: argparse.Namespace) -> int:
    """``bookie shell listbookies``: a line per bookie, ``ID address=HOST:PORT
    location=/REGION/RACK`` (`` (read-only)`` after it with ``-a``); ``--json`` lists the ids
    by kind, as before, and ``bookies``: one object per bookie with the same fields."""
    def body(store) -> int:
        kinds = [False, True] if args.all else [bool(args.readonly)]
        rows = [row for readonly in kinds
                for row in bookie_rows(store, store.list_bookies(readonly=readonly), readonly)]
        if args.json:
            doc = {("readonly" if readonly else "writable"):
                   [r["bookie_id"] for r in rows if r["readonly"] == readonly]
                   for readonly in kinds}
            doc["bookies"] = rows
            print_json(doc)
            return 0
        if not rows:
            print("no bookies registered" if args.all else
                  f"no {'read-only' if args.readonly else 'writable'} bookies registered")
        for r in rows:
            print(f"{r['bookie_id']} address={r['address'] or 'unknown'} "
                  f"location={r['location']}" + (" (read-only)" if args.all and r["readonly"]
                                                  else ""))
        return 0
    return with_store(args, body)


def _cookie(store, bookie_id: str) -> tuple[dict | None, int]:
    try:
        check_bookie_id(bookie_id)
    except ValueError as e:
        raise CliError(str(e)) from None
    try:
        data, version = store.read_cookie(bookie_id)
    except CookieNotFoundError:
        return None, -1
    try:
        return orjson.loads(data), version
    except orjson.JSONDecodeError:
        return {"raw": data.decode(errors="replace")}, version


def _cookie_get(args) -> int:
    def body(store) -> int:
        cookie, version = _cookie(store, args.bookie_id)
        if cookie is None:
            print(f"cookie_get: no cookie of {args.bookie_id} in the store", file=sys.stderr)
            return 1
        if args.json:
            print_json({"bookie_id": args.bookie_id, "version": version, "cookie": cookie})
            return 0
        print(f"cookie of {args.bookie_id} (version {version}):")
        for key, value in cookie.items():
            print(f"  {key}: {value}")
        return 0
    return with_store(args, body)


def _cookie_delete(args) -> int:
    def body(store) -> int:
        cookie, version = _cookie(store, args.bookie_id)
        if cookie is None:
            print(f"cookie_delete: no cookie of {args.bookie_id} in the store", file=sys.stderr)
            return 1
        if args.bookie_id in store.registered_bookies():
            raise CliError(f"{args.bookie_id} is registered (running): stop it first")
        if not args.force:
            raise CliError(f"cookie_delete removes the cookie of {args.bookie_id} for good; "
                           f"add -force")
        store.remove_cookie(args.bookie_id, version)
        if args.json:
            print_json({"deleted": args.bookie_id})
        else:
            print(f"cookie of {args.bookie_id} removed from the store")
        return 0
    return with_store(args, body)
