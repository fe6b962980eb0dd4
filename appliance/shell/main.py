"""``bookie shell``: administration of the cluster metadata and of a bookie's disks.

    bookie shell metaformat [--non-interactive] [--force]   create and initialise (or wipe) the
                  [--force-while-bookies-registered]         metadata store
    bookie shell bookieformat [--conf FILE] [--non-interactive] [--force]   a bookie's directories
    bookie shell listbookies [--readonly]                    registered bookies
    bookie shell listledgers                                 every ledger id
    bookie shell ledgermetadata LEDGER_ID                    one ledger's metadata
    bookie shell genkey NAME [--dir DIR] [--force]           a CURVE keypair (security.py)
    bookie shell gentoken FILE                               the admin API's bearer token (same)
    bookie shell zkprotect                                   put the ZooKeeper ACL on an existing
                                                             tree (zk.py)

The metadata commands take ``--metadata URI`` (default: the ``--conf FILE``'s store, else
$BOOKIE_METADATA_URI) and print human-readable text, or one JSON document with ``--json``.
ZooKeeper credentials come from ``--zk-digest-auth-file FILE`` or the ``--conf`` file's
``zkEnableSecurity`` / ``zkDigestAuthFile``; a refusal by ZooKeeper is one line, exit status 2.  Only ``metaformat`` creates a store;
the others refuse a URI that names none (a typo must not look like an empty cluster).

The storage tools over a bookie's own files (rebuild-index, readjournal, readlog, lastmark,
listfilesondisc, readledger, localconsistencycheck) are in ``disk.py``; the healing and
cluster verbs (recover, decommissionbookie, listunderreplicated, autorecovery, whoisauditor,
triggeraudit, deleteledger, simpletest, bookiesanity, bookieinfo, updatecookie) in
``recovery.py``; triggergc in ``gc.py``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any, Callable

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell import (
    cluster, disk, gc, parity, placement, recovery, security, verify, whatif, zk)
from bookie.appliance.shell.registry import (
    ENV_URI, add_bookie_conf_arguments, add_ledger_id_argument, add_zk_auth_option, ask, import_store_modules,
    ledger_id_of, metadata_uri_arg, print_json, quiet_kazoo, refuse_while_registered, store_exists,
    with_store)
from bookie.appliance.privileges import run_as_owner
from bookie.metadata import CookieNotFoundError, MetadataError, NoSuchLedgerError, open_metadata
from bookie.storage import dirlock
from bookie.storage.layout import (
    LayoutError, all_dirs, check_not_in_use, check_or_stamp, dirs_holding_data, format_bookie)
from bookie.workers.config import BookieConfig, ConfigError, parse_overrides


def register(subparsers: Any) -> None:
    """Add the ``shell`` command group to the ``bookie`` parser."""
    shell = subparsers.add_parser("shell", help="administration: the metadata store, bookies, ledgers, cookies, healing, "
                                       "a bookie's files, keys, safe-to-stop checks",
                                  description=__doc__.split("\n\n")[0].replace("``", ""))
    commands = shell.add_subparsers(dest="shell_command", metavar="SUBCOMMAND")
    commands.required = True

    def metadata_command(name: str, help_text: str, handler: Callable) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--metadata", metavar="URI", default=None, type=metadata_uri_arg,
                            help=f"metadata service URI (default: the --conf file's, else "
                                 f"${ENV_URI}); BookKeeper's ';' between ZooKeeper hosts is "
                                 f"accepted")
        parser.add_argument("--conf", metavar="FILE", default=None,
                            help="a bookie's configuration file: its metadataServiceUri (and "
                                 "zkEnableSecurity, zkDigestAuthFile)")
        add_zk_auth_option(parser)
        parser.add_argument("--timeout-s", type=float, default=10.0,
                            help="longest any metadata call may take (default 10)")
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")
        parser.add_argument("--verbose", action="store_true",
                            help="also show the ZooKeeper client's own log lines")
        parser.set_defaults(func=quiet_kazoo(handler))
        return parser

    p = metadata_command("metaformat", "Create and initialise the cluster metadata store; with "
                         "--force wipe what is there first.", _metaformat)
    p.add_argument("--non-interactive", "-nonInteractive", action="store_true",
                   help="never ask: abort if metadata exists, unless --force")
    p.add_argument("--force", "-force", action="store_true",
                   help="wipe existing metadata (refused while bookies are registered); on a "
                        "terminal it still asks, unless --non-interactive")
    p.add_argument("--force-while-bookies-registered", action="store_true",
                   help="wipe even while bookies are registered (running): their ledgers and "
                        "cookies go, and they must be reformatted; implies --force")

    p = metadata_command("listbookies", "List the bookies registered as available.", _listbookies)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--readwrite", "-rw", action="store_true",
                       help="writable bookies (the default)")
    which.add_argument("--readonly", "-ro", action="store_true",
                       help="list read-only bookies instead")
    which.add_argument("--all", "-a", action="store_true",
                       help="writable and read-only bookies, each marked")

    p = metadata_command("listledgers", "List every ledger id, ascending.", _listledgers)
    p.add_argument("--meta", "-m", action="store_true", help="each ledger's metadata too")

    p = metadata_command("ledgermetadata", "Print one ledger's metadata.", _ledgermetadata)
    add_ledger_id_argument(p)

    disk.register(commands)

    p = commands.add_parser("bookieformat", help="Format this bookie's journal and ledger "
                            "directories (and its cookie).",
                            description="Format this bookie's journal and ledger directories "
                                        "(refused while a bookie runs on them).")
    add_bookie_conf_arguments(p)
    p.add_argument("--non-interactive", "-nonInteractive", action="store_true",
                   help="never ask: abort if data exists, unless --force")
    p.add_argument("--force", "-force", action="store_true", help="wipe existing data")
    p.set_defaults(func=_bookieformat)

    p = commands.add_parser("initbookie", help="Initialise this bookie's directories and its "
                            "cookie (refused when they hold data or the id has a cookie).",
                            description="Initialise a new bookie: its journal, ledger and index "
                                        "directories must be empty and its id must have no "
                                        "cookie in the metadata store; then both are stamped, "
                                        "as its first start would.")
    add_bookie_conf_arguments(p)
    p.set_defaults(func=_initbookie)

    recovery.register(commands, metadata_command)
    gc.register(commands)
    security.register(commands)
    zk.register(commands, metadata_command)
    cluster.register(commands, metadata_command)
    placement.register(commands, metadata_command)
    parity.register(commands, metadata_command)
    whatif.register(commands, metadata_command)
    verify.register(commands, metadata_command)


# -- handlers ----------------------------------------------------------------------------------

def _metaformat(args: argparse.Namespace) -> int:
    existed = store_exists(args)

    def body(store) -> int:
        force = args.force or args.force_while_bookies_registered
        # BookKeeper's -force still asks unless -nonInteractive, terminal or not (a script's
        # stdin: end of input answers no, and nothing is wiped).
        if (force and store.has_data() and not args.non_interactive
                and not _confirmed_wipe(store, args)):
            return 1
        if not existed and not force and store.has_data():
            # Data without a layout record: a store made before stores had to be created
            # (a bookie made it).  Initialised now, keeping the data; only --force wipes it.
            print("metadata store initialised; the data it already held is kept (--force "
                  "wipes it)")
            return 0
        if store.has_data() and not force:
            if args.non_interactive:
                raise CliError("the metadata store already holds data; add --force to wipe it")
            if not _confirmed_wipe(store, args):
                return 1
            force = True
        if force:
            refuse_while_registered(store, args)
        store.format(force=force)
        if args.json:
            print_json({"formatted": True, "instance_id": store.instance_id()})
        else:
            print(f"metadata formatted (instance {store.instance_id()})")
        return 0
    return with_store(args, body, create=True)  # the one shell command that makes a store


def _confirmed_wipe(store, args: argparse.Namespace) -> bool:
    refuse_while_registered(store, args)
    if ask("The metadata store already holds data. Wipe it? (y/N) "):
        return True
    print("metaformat aborted; nothing changed", file=sys.stderr)
    return False


def _listbookies(args: argparse.Namespace) -> int:
    return cluster.listbookies(args)  # ids, addresses and locations


def _listledgers(args: argparse.Namespace) -> int:

    def body(store) -> int:
        if not args.meta:
            if args.json:
                print_json({"ledgers": list(store.list_ledgers())})
                return 0
            for ledger_id in store.list_ledgers():
                print(ledger_id)
            return 0
        docs = []
        for ledger_id in store.list_ledgers():
            try:
                meta, version = store.read_ledger(ledger_id)
            except NoSuchLedgerError:  # deleted while listing
                continue
            if args.json:
                docs.append({"ledger_id": ledger_id, "version": version, **meta.to_dict()})
            else:
                print(_describe(ledger_id, meta, version))
        if args.json:
            print_json({"ledgers": docs})
        return 0
    return with_store(args, body)


def _ledgermetadata(args: argparse.Namespace) -> int:
    ledger_id = ledger_id_of(args, "ledgermetadata")

    def body(store) -> int:
        try:
            meta, version = store.read_ledger(ledger_id)
        except NoSuchLedgerError:  # nothing to show: exit 1, as cookie_get and endpointinfo
            print(f"ledgermetadata: no ledger {ledger_id} in the store ('bookie shell "
                  f"listledgers' lists them)", file=sys.stderr)
            return 1
        if args.json:
            print_json({"ledger_id": ledger_id, "version": version, **meta.to_dict()})
            return 0
        print(_describe(ledger_id, meta, version))
        return 0
    return with_store(args, body)


def _describe(ledger_id: int, meta, version) -> str:
    """A ledger's metadata as text, for people."""
    created = datetime.datetime.fromtimestamp(meta.ctime_ms / 1000, datetime.timezone.utc)
    lines = [
        f"ledger {ledger_id} (metadata version {version})",
        f"  state:          {meta.state.value}",
        f"  ensemble/quorums: E={meta.ensemble_size} Qw={meta.write_quorum} "
        f"Qa={meta.ack_quorum}",
        f"  last entry:     {meta.last_entry_id}  length: {meta.length} bytes",
        f"  digest:         {meta.digest_type}",
        f"  created:        {created.isoformat(timespec='milliseconds')}",
    ]
    for key, value in sorted(meta.custom.items()):
        lines.append(f"  custom {key}: {value}")
    lines.append("  fragments:")
    for first, ensemble in meta.fragments:
        lines.append(f"    from entry {first}: {', '.join(ensemble)}")
    return "\n".join(lines)


def _bookieformat(args: argparse.Namespace) -> int:
    try:
        conf = BookieConfig.load(args.conf, parse_overrides(args.set))
        import_store_modules(conf.metadata_uri)
        run_as_owner(all_dirs(conf), "bookieformat")
        check_not_in_use(conf, purpose="format it")  # before asking; format_bookie checks again
        force = args.force
        holding = dirs_holding_data(conf)
        if holding and not force:
            if args.non_interactive:
                print(f"bookieformat: {', '.join(holding)} hold bookie data; pass --force to wipe",
                      file=sys.stderr)
                return 1
            if not ask(f"Wipe bookie data in {', '.join(holding)}? [y/N] "):
                print("bookieformat: nothing changed", file=sys.stderr)
                return 1
            force = True
        wiped = format_bookie(conf, force=force)
    except (ConfigError, LayoutError, MetadataError, OSError) as e:
        raise CliError(str(e)) from None
    print(f"bookieformat: wiped {len(wiped)} directories" if wiped else
          "bookieformat: nothing to wipe")
    return 0


def _initbookie(args: argparse.Namespace) -> int:
    """BookKeeper's ``initbookie``: stamp a new bookie's directories and store cookie."""

    try:
        conf = BookieConfig.load(args.conf, parse_overrides(args.set), check_dirs=False)
        if not conf.metadata_uri:
            raise CliError("initbookie needs the metadata store (metadataServiceUri): the "
                           "cookie is kept there too")
        if conf.bookie_port == 0:
            raise CliError("initbookie needs the bookie's id: set bookiePort (0 picks a port "
                           "at the first start)")
        import_store_modules(conf.metadata_uri)
        run_as_owner(all_dirs(conf), "initbookie")
        lock = dirlock.DirectoryLock.acquire(all_dirs(conf), purpose="initialise it")
        try:
            holding = dirs_holding_data(conf)
            if holding:
                raise CliError(f"{', '.join(holding)} hold bookie data already: this bookie "
                               f"is initialised ('bookie shell bookieformat' wipes it)")
            with open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                               zk_security=conf.zk_security) as store:
                try:
                    store.read_cookie(conf.bookie_id)
                    raise CliError(f"{conf.bookie_id} has a cookie in the metadata store: "
                                   f"another bookie uses this id ('bookie shell cookie_get "
                                   f"{conf.bookie_id}')")
                except CookieNotFoundError:
                    pass
                from bookie.storage import server_key  # lazy: zmq
                cookie = check_or_stamp(conf, server_key.ensure(conf, None))
                store.write_cookie(conf.bookie_id, orjson.dumps(cookie))
        finally:
            lock.release()
    except (ConfigError, LayoutError, MetadataError, OSError) as e:
        raise CliError(str(e)) from None
    print(f"bookie {conf.bookie_id} initialised: {len(all_dirs(conf))} directories stamped, "
          f"cookie written to the metadata store")
    return 0
