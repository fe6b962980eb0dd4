"""``bookie shell`` verbs that BookKeeper's operators reach for first, with its names:

    clusterinfo                                  the cluster at a glance: auditor, bookies by
                                                 state, under-replication (the same facts as
                                                 GET /api/v1/bookie/cluster_info)
    cookie_generate BOOKIE_ID -j DIRS -l DIRS [-ix DIRS] [-i INSTANCE_ID] [-o FILE]
                                                 write the cookie such a bookie would have (the
                                                 store's instance id unless -i); stdout unless -o
    cookie_create BOOKIE_ID -cf FILE             put that cookie in the store (refused if the
                                                 bookie has one)
    cookie_update BOOKIE_ID -cf FILE             replace the bookie's cookie in the store with
                                                 the file's (refused if it has none, or runs)
    rebuild-db-ledger-locations-index, rebuild-db-ledgers-index
                                                 BookKeeper's names of ``rebuild-index``, which
                                                 rebuilds every part of the index at once

A cookie file is the JSON document ``cookie_generate`` writes (``cookie_get --json`` shows the
same object under ``cookie``); its ``bookie_id`` must be the one named.  Refusals are one line,
exit status 2; ``cookie_update`` of a bookie with no cookie exits 1.
"""

from __future__ import annotations

import sys
import types
from typing import Callable

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import print_json, with_store
from bookie.metadata import CookieNotFoundError
from bookie.metadata.errors import NodeExistsError
from bookie.metadata.store import check_bookie_id
from bookie.storage.layout import expected_cookie

REBUILD_ALIASES = ("rebuild-db-ledger-locations-index", "rebuild-db-ledgers-index")


def register(commands, metadata_command: Callable) -> None:
    metadata_command("clusterinfo", "Show the cluster: the auditor, how many bookies are "
                     "writable, read-only and unavailable, whether any ledger is "
                     "under-replicated.", _clusterinfo)

    p = metadata_command("cookie_generate", "Write the cookie a bookie with these directories "
                         "would have (to stdout, or -o FILE).", _cookie_generate)
    p.add_argument("bookie_id", metavar="BOOKIE_ID")
    p.add_argument("--journal-dirs", "-j", required=True, metavar="DIRS",
                   help="its journal directories, comma-separated")
    p.add_argument("--ledger-dirs", "-l", required=True, metavar="DIRS",
                   help="its ledger directories, comma-separated")
    p.add_argument("--index-dirs", "-ix", metavar="DIRS", default=None,
                   help="its index directories (default: the ledger directories)")
    p.add_argument("--instance-id", "-i", metavar="ID", default=None,
                   help="the cluster's instance id (default: the store's)")
    p.add_argument("--output-file", "-o", metavar="FILE", default=None)

    for name, what, handler in (
            ("cookie_create", "Create a bookie's cookie in the store from a cookie file "
                              "(refused if it has one).", _cookie_create),
            ("cookie_update", "Replace a bookie's cookie in the store with a cookie file's "
                              "(refused while it runs).", _cookie_update)):
        p = metadata_command(name, what, handler)
        p.add_argument("bookie_id", metavar="BOOKIE_ID")
        p.add_argument("--cookie-file", "-cf", required=True, metavar="FILE")

    rebuild = commands.choices.get("rebuild-index")
    if rebuild is not None:  # the same parser under BookKeeper's names (argparse's choices)
        for alias in REBUILD_ALIASES:
            commands.choices[alias] = rebuild


def _clusterinfo(args) -> int:
    from bookie.appliance.admin.parity import cluster_info_of  # lazy: lmdb

    def body(store) -> int:
        info = cluster_info_of(store)
        if args.json:
            print_json(info)
        else:
            for key, value in info.items():
                print(f"{key}: {str(value).lower() if isinstance(value, bool) else value}")
        return 0
    return with_store(args, body)


def _dirs(text: str) -> list[str]:
    return [d.strip() for d in text.split(",") if d.strip()]


def _cookie_generate(args) -> int:

    try:
        check_bookie_id(args.bookie_id)
    except ValueError as e:
        raise CliError(str(e)) from None
    journals, ledgers = _dirs(args.journal_dirs), _dirs(args.ledger_dirs)
    if not journals or not ledgers:
        raise CliError("cookie_generate: -j and -l each name at least one directory")
    instance = args.instance_id
    if instance is None:
        instance = with_store(args, lambda store: store.instance_id() or "")
    conf = types.SimpleNamespace(bookie_id=args.bookie_id, journal_dir=journals[0],
                                 journal_dirs=journals, ledger_dirs=ledgers,
                                 index_dirs=_dirs(args.index_dirs or "") or ledgers)
    text = orjson.dumps(expected_cookie(conf, instance), option=orjson.OPT_INDENT_2).decode()
    if args.output_file:
        with open(args.output_file, "w") as f:
            f.write(text + "\n")
        print(f"cookie of {args.bookie_id} written to {args.output_file}", file=sys.stderr)
    else:
        print(text)
    return 0


def _read_cookie_file(path: str, bookie_id: str) -> dict:
    try:
        with open(path, "rb") as f:
            cookie = orjson.loads(f.read())
    except OSError as e:
        raise CliError(f"--cookie-file {path}: {e.strerror}") from None
    except orjson.JSONDecodeError:
        raise CliError(f"--cookie-file {path}: not a cookie (JSON, as cookie_generate writes "
                       f"it)") from None
    if isinstance(cookie, dict) and isinstance(cookie.get("cookie"), dict):
        cookie = cookie["cookie"]  # cookie_get --json's document
    if not isinstance(cookie, dict) or "instance_id" not in cookie:
        raise CliError(f"--cookie-file {path}: not a cookie (no instance_id)")
    if cookie.get("bookie_id") != bookie_id:
        raise CliError(f"--cookie-file {path} is the cookie of {cookie.get('bookie_id')!r}, "
                       f"not of {bookie_id}")
    return cookie


def _check_instance(store, cookie: dict, path: str) -> None:
    instance = store.instance_id()
    if instance and cookie["instance_id"] != instance:
        raise CliError(f"--cookie-file {path} names instance {cookie['instance_id']}, but this "
                       f"store is instance {instance}")


def _cookie_create(args) -> int:

    cookie = _read_cookie_file(args.cookie_file, args.bookie_id)

    def body(store) -> int:
        _check_instance(store, cookie, args.cookie_file)
        try:
            store.write_cookie(args.bookie_id, orjson.dumps(cookie))
        except NodeExistsError:
            raise CliError(f"{args.bookie_id} has a cookie in the store already "
                           f"(cookie_update replaces it)") from None
        _done(args, "created")
        return 0
    return with_store(args, body)


def _cookie_update(args) -> int:

    cookie = _read_cookie_file(args.cookie_file, args.bookie_id)

    def body(store) -> int:
        _check_instance(store, cookie, args.cookie_file)
        if args.bookie_id in store.registered_bookies():
            raise CliError(f"{args.bookie_id} is registered (running): stop it first")
        try:
            _, version = store.read_cookie(args.bookie_id)
        except CookieNotFoundError:
            print(f"cookie_update: no cookie of {args.bookie_id} in the store (cookie_create "
                  f"makes one)", file=sys.stderr)
            return 1
        store.write_cookie(args.bookie_id, orjson.dumps(cookie), version)
        _done(args, "updated")
        return 0
    return with_store(args, body)


def _done(args, what: str) -> None:
    if args.json:
        print_json({what: args.bookie_id})
    else:
        print(f"cookie of {args.bookie_id} {what} in the store")


