"""``bookie shell`` verbs for healing and checking a cluster (BookKeeper's names):

    recover BOOKIE... [--dry-run] [--skip-open-ledgers]   re-replicate the bookies' ledgers now
    decommissionbookie BOOKIE                              drain a bookie, verify, unregister it
    listunderreplicated [--missing-replica BOOKIE]         marked ledgers (and lost ones)
    autorecovery --enable | --disable | --status           the cluster-wide switch
    whoisauditor                                           the elected auditor
    triggeraudit                                           ask the auditor for a full check now
    deleteledger LEDGER_ID [--force]                       remove a ledger
    simpletest [--ensemble-size E ...] [--entries N]       write and read N entries on the cluster
    bookiesanity [--bookie ID]                             write and read on this bookie only
    bookieinfo                                             free / total disk per bookie (exit
                                                           status 1 if one does not answer)
    updatecookie --conf F [--list | --delete --force]      rewrite a stopped bookie's cookie

Each takes ``--metadata URI`` or ``--conf FILE`` (a bookie's configuration) and ``--json``.
The verbs that speak to bookies (recover, decommissionbookie, simpletest, bookiesanity,
bookieinfo) take client keys too: ``--client-conf FILE`` and ``--set KEY=VALUE``
(``bookie.client.options``), the way a CURVE bookie's enrolled key reaches them.
BookKeeper's single-dash spellings are accepted too (``-ledgerid``, ``-force``,
``-nonInteractive``, ``-dryrun``, ``-skipOpenLedgers``).  Long verbs write progress to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell import rename
from bookie.appliance.shell.known import refused, require_bookies
from bookie.appliance.shell.registry import ask
from bookie.appliance.shell.registry import client_keys as _client_keys
from bookie.appliance.shell.registry import metadata_uri as _uri
from bookie.appliance.shell.registry import print_json as _print_json
from bookie.appliance.shell.registry import with_store as _with_store
from bookie.appliance.shell.registry import zk_security as _zk_security
from bookie.appliance.shell.whatif import warn_before_stopping
from bookie.client import options as client_options
from bookie.client.resolver import BookieResolver
from bookie.appliance.privileges import run_as_owner
from bookie.appliance.shell.registry import import_store_modules as _import_store_modules
from bookie.autorecovery import rules
from bookie.client.config import ClientConfig
from bookie.metadata import CookieNotFoundError, NoSuchLedgerError
from bookie.metadata.ledger import LedgerMetadata
from bookie.metadata.underreplication import UnderReplication
from bookie.storage import dirlock
from bookie.storage.layout import (
    LAYOUT_VERSION, PUBLIC_KEY_FIELD, _has_data, _read_json, _write_atomic, all_dirs,
    check_not_in_use, current_dir, expected_cookie)
from bookie.workers.config import BookieConfig, ConfigError, parse_overrides


def register(commands, metadata_command: Callable) -> None:
    p = metadata_command("recover", "Re-replicate every ledger with a fragment on the given "
                         "bookies to other bookies now, and repoint the metadata.", _recover)
    p.add_argument("bookies", metavar="BOOKIE", nargs="+", help="id of a lost bookie (host:port, or its bookieId)")
    p.add_argument("--dry-run", "-dryrun", action="store_true",
                   help="say what would be copied where; change nothing")
    p.add_argument("--skip-open-ledgers", "-skipOpenLedgers", action="store_true",
                   help="leave ledgers that are still open (their writer may be alive)")
    _batch_args(p)
    client_options.add_arguments(p)

    p = metadata_command("decommissionbookie", "Drain a bookie (re-replicate everything it "
                         "holds, also while it still runs), verify that no ledger names it, then "
                         "remove its cookie.", _decommission)
    p.add_argument("bookie", metavar="BOOKIE")
    _batch_args(p)
    client_options.add_arguments(p)

    p = metadata_command("listunderreplicated", "List ledgers marked under-replicated, and "
                         "ledgers reported as having lost entries.", _listunderreplicated)
    p.add_argument("--missing-replica", "-missingreplica", metavar="BOOKIE",
                   help="only ledgers missing a copy on this bookie")
    p.add_argument("--print-missing-replica", "-printmissingreplica", action="store_true",
                   help="BookKeeper's flag to show the missing copies: always shown here")

    p = metadata_command("autorecovery", "Enable, disable or show cluster-wide autorecovery.",
                         _autorecovery)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--enable", "-enable", action="store_true")
    group.add_argument("--disable", "-disable", action="store_true")
    group.add_argument("--status", "-status", action="store_true")

    metadata_command("whoisauditor", "Print the elected auditor.", _whoisauditor)
    metadata_command("triggeraudit", "Ask the auditor for a full check now.", _triggeraudit)

    p = metadata_command("deleteledger", "Delete a ledger (its metadata; bookies reclaim the "
                         "space in their garbage collection).", _deleteledger)
    p.add_argument("ledger_id", metavar="LEDGER_ID", type=int, nargs="?")
    p.add_argument("-ledgerid", "--ledger-id", dest="ledger_id_opt", type=int)
    p.add_argument("--force", "-force", "--non-interactive", "-nonInteractive",
                   action="store_true", help="do not ask")

    p = metadata_command("simpletest", "Write N entries to a new ledger on the cluster, read "
                         "them back, delete the ledger.", _simpletest)
    p.add_argument("--ensemble-size", "-ensemble", type=int, default=None,
                   help="default: 3, or every writable bookie when fewer are registered")
    p.add_argument("--write-quorum", "-writeQuorum", type=int, default=None,
                   help="default: 2, at most the ensemble size")
    p.add_argument("--ack-quorum", "-ackQuorum", type=int, default=None,
                   help="default: 2, at most the write quorum")
    p.add_argument("--entries", "-numEntries", type=int, default=100)
    client_options.add_arguments(p)

    p = metadata_command("bookiesanity", "Write and read a few entries on one bookie only (the "
                         "--conf file's bookie, or --bookie).", _bookiesanity)
    p.add_argument("--bookie", metavar="BOOKIE", help="bookie id: host:port or a bookieId (default: the --conf bookie)")
    p.add_argument("--entries", "-entries", type=int, default=10)
    client_options.add_arguments(p)

    p = metadata_command("bookieinfo", "Free and total ledger-disk space of every registered "
                         "bookie.", _bookieinfo)
    client_options.add_arguments(p)

    p = metadata_command("updatecookie", "Rewrite a stopped bookie's cookie (in its directories "
                         "and the store) to match its configuration now: a new bookie id "
                         "(advertisedAddress, bookiePort) or added ledger/index directories.",
                         _updatecookie)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--list", "-list", action="store_true", help="show the cookies only")
    group.add_argument("--delete", "-delete", action="store_true",
                       help="remove the bookie's cookie from the store (with --force)")
    p.add_argument("--force", "-force", action="store_true")

    rename.register(commands, metadata_command)  # updateledgers: the rename's second step

    p = metadata_command("expandstorage", "Add new, empty ledger or index directories to a "
                         "stopped bookie: list them in its configuration first; its cookie (in "
                         "its directories and the store) then names them.", _expandstorage)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a key")


def _expandstorage(args) -> int:
    """``updatecookie`` limited to added directories (BookKeeper's ``expandstorage``)."""
    args.list = args.delete = args.force = False
    args.expand_only = True
    return _updatecookie(args)


def _batch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=100, help="entries per read and add (100)")
    p.add_argument("--rate-bytes-per-s", type=int, default=-1,
                   help="copy rate limit (-1: unlimited)")


def _progress(args) -> Callable:
    def say(text: str) -> None:
        if not args.json:
            print(text, file=sys.stderr, flush=True)
    return say


# -- recover and decommission ------------------------------------------------------------------

def _passwords(args) -> list[bytes]:
    """The ``--conf`` file's autoRecoveryLedgerPasswords (and its file's lines), as a bookie's
    workers use them: the only keys to copy with where the store holds no recovery secret
    (ZooKeeper without zkBookieDigestAuthFile; docs/autorecovery.md "No key, no copy")."""
    if not getattr(args, "conf", None):
        return []
    try:
        return BookieConfig.load(args.conf, check_dirs=False).autorecovery_passwords()
    except ConfigError as e:
        raise CliError(f"--conf {args.conf}: {e}") from None


def _heal_bookies(store, args, bookies: list[str], skip_open: bool, dry_run: bool,
                  read_from_them: bool = False, client_keys: dict | None = None) -> dict:
    """Heal every ledger naming ``bookies`` in this process; returns a summary.  ``client_keys``:
    of ``--client-conf`` / ``--set`` (the ledger's own password and digest are the replicator's)."""
    from bookie.autorecovery.replicator import Replicator  # lazy: zmq
    say = _progress(args)
    targets = set(bookies)
    ledgers = []
    for ledger_id in store.list_ledgers():
        try:
            meta, _ = store.read_ledger(ledger_id)
        except Exception:  # noqa: BLE001 - deleted meanwhile
            continue
        if rules.named_bookies(meta) & targets:
            ledgers.append(ledger_id)
    summary = {"bookies": sorted(targets), "ledgers": len(ledgers), "healed": [],
               "skipped": [], "lost": [], "failed": []}
    replicator = Replicator(store, _passwords(args), batch=args.batch,
                            rate_bytes_per_s=args.rate_bytes_per_s,
                            timeout_s=args.timeout_s, dry_run=dry_run,
                            log=lambda event, **f: say(f"  {event} " + " ".join(
                                f"{k}={v}" for k, v in f.items() if k != "level")),
                            curve_keys={k: v for k, v in (client_keys or {}).items()
                                        if k not in ("passwd", "digestType")})
    replicator.exclude = targets
    started = time.monotonic()
    try:
        for n, ledger_id in enumerate(ledgers, 1):
            outcome = replicator.heal(ledger_id, sorted(targets), force=True,
                                      skip_open=skip_open, read_from_missing=read_from_them)
            key = {"healed": "healed", "settled": "healed", "lost": "lost",
                   "wait": "skipped"}.get(outcome, "failed")
            summary[key].append(ledger_id)
            say(f"recover: ledger {ledger_id} ({n}/{len(ledgers)}): {outcome}; "
                f"{replicator.copied_bytes / 1e6:.1f} MB copied in "
                f"{time.monotonic() - started:.1f} s")
    finally:
        replicator.close()
    summary["copy_seconds"] = round(time.monotonic() - started, 3)
    summary["copied_bytes"] = replicator.copied_bytes
    summary["copied_entries"] = replicator.copied_entries
    return summary


def _print_summary(args, summary: dict, verb: str) -> None:
    if args.json:
        _print_json(summary)
        return
    print(f"{verb}: {summary['ledgers']} ledgers name {', '.join(summary['bookies'])}: "
          f"{len(summary['healed'])} healed, {len(summary['skipped'])} skipped (open), "
          f"{len(summary['lost'])} with lost entries, {len(summary['failed'])} to retry; "
          f"{summary['copied_entries']} entries ({summary['copied_bytes']} bytes) copied")
    for key in ("lost", "failed", "skipped"):
        if summary[key]:
            print(f"  {key}: {', '.join(map(str, summary[key]))}")


def _recover(args) -> int:
    keys = _client_keys(args)

    def body(store) -> int:
        with refused("recover"):
            require_bookies(store, args.bookies)
        summary = _heal_bookies(store, args, args.bookies, args.skip_open_ledgers, args.dry_run,
                                client_keys=keys)
        summary["dry_run"] = args.dry_run
        _print_summary(args, summary, "recover (dry run)" if args.dry_run else "recover")
        return 0 if not summary["failed"] else 1
    return _with_store(args, body)


def _decommission(args) -> int:
    keys = _client_keys(args)

    def body(store) -> int:
        bookie = args.bookie
        with refused("decommissionbookie"):
            require_bookies(store, [bookie])
        say = _progress(args)
        warn_before_stopping(store, bookie)  # the last copy of anything: say so (never fails)
        if bookie in store.list_bookies():
            say(f"decommissionbookie: {bookie} is registered writable; new ledgers may still "
                f"land on it (make it read-only first: SIGUSR1 or the admin API)")
        summary = {}
        for attempt in range(3):  # new ledgers may have landed on it meanwhile
            summary = _heal_bookies(store, args, [bookie], skip_open=False, dry_run=False,
                                    read_from_them=True, client_keys=keys)
            left = [i for i in store.list_ledgers()
                    if _names(store, i, bookie, rules)]
            if not left:
                break
        summary["left"] = left
        if left:
            _print_summary(args, summary, "decommissionbookie")
            raise CliError(f"{len(left)} ledgers still name {bookie}: "
                           f"{', '.join(map(str, left[:20]))}; run it again")
        try:
            store.remove_cookie(bookie)
            summary["cookie_removed"] = True
        except CookieNotFoundError:
            summary["cookie_removed"] = False
        running = bookie in store.list_bookies() + store.list_bookies(readonly=True)
        summary["still_running"] = running
        _print_summary(args, summary, "decommissionbookie")
        if not args.json:
            print(f"decommissionbookie: no ledger names {bookie}; its cookie is removed"
                  + ("; it still runs: stop it now" if running else ""))
        return 0
    return _with_store(args, body)


def _names(store, ledger_id: int, bookie: str, rules) -> bool:
    try:
        return bookie in rules.named_bookies(store.read_ledger(ledger_id)[0])
    except Exception:  # noqa: BLE001 - deleted meanwhile
        return False


# -- marks, the auditor, the switch ------------------------------------------------------------

def _listunderreplicated(args) -> int:

    def body(store) -> int:
        ur = UnderReplication(store)
        marks = ur.marks()
        if args.missing_replica and not any(args.missing_replica in v for v in marks.values()):
            with refused("listunderreplicated"):  # none missing there, or a typo?
                require_bookies(store, [args.missing_replica])
        if args.missing_replica:
            marks = {k: v for k, v in marks.items() if args.missing_replica in v}
        rows = [{"ledger_id": k, "missing": v, "locked_by": ur.lock_holder(k)}
                for k, v in sorted(marks.items())]
        lost = ur.lost()
        if args.json:
            _print_json({"underreplicated": rows,
                         "lost": [{"ledger_id": k, **v} for k, v in sorted(lost.items())]})
            return 0
        if not rows:
            print("no ledger is marked under-replicated")
        for row in rows:
            held = f" (being healed by {row['locked_by']})" if row["locked_by"] else ""
            print(f"{row['ledger_id']}: missing {', '.join(row['missing'])}{held}")
        for ledger_id, detail in sorted(lost.items()):
            print(f"{ledger_id}: LOST ENTRIES ({detail.get('reason', '?')})")
        return 0
    return _with_store(args, body)


def _autorecovery(args) -> int:

    def body(store) -> int:
        ur = UnderReplication(store)
        if args.enable or args.disable:
            ur.set_enabled(bool(args.enable))
        enabled = ur.enabled()
        if args.json:
            _print_json({"enabled": enabled})
        else:
            print(f"autorecovery is {'enabled' if enabled else 'disabled'}")
        return 0
    return _with_store(args, body)


def _whoisauditor(args) -> int:

    def body(store) -> int:
        found = UnderReplication(store).auditor()
        if args.json:
            _print_json({"auditor": found[1] if found else None,
                         "bookie": found[1].rsplit("/", 1)[0] if found else None})
            return 0
        if found is None:
            print("no auditor: no autorecovery worker runs")
            return 1
        print(f"auditor: {found[1].rsplit('/', 1)[0]} (worker {found[1]})")
        return 0
    return _with_store(args, body)


def _triggeraudit(args) -> int:

    def body(store) -> int:
        version = UnderReplication(store).trigger_audit()
        if args.json:
            _print_json({"triggered": True, "trigger": version})
        else:
            print("audit triggered: the auditor checks every ledger on its next round")
        return 0
    return _with_store(args, body)


# -- ledgers and bookies -----------------------------------------------------------------------

def _deleteledger(args) -> int:
    ledger_id = args.ledger_id if args.ledger_id is not None else args.ledger_id_opt
    if ledger_id is None:
        raise CliError("name the ledger: deleteledger LEDGER_ID (or -ledgerid N)")

    def body(store) -> int:
        try:
            store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            raise CliError(f"no ledger {ledger_id}") from None
        if not args.force and not ask(f"Delete ledger {ledger_id}? (y/N) "):
            print(f"deleteledger: ledger {ledger_id} kept", file=sys.stderr)
            return 1
        store.remove_ledger(ledger_id)
        if args.json:
            _print_json({"deleted": ledger_id})
        else:
            print(f"ledger {ledger_id} deleted")
        return 0
    return _with_store(args, body)


def _simpletest_quorums(args, writable: int) -> None:
    """BookKeeper's defaults (E=3, Qw=2, Qa=2), fitted to a smaller cluster (the one-bookie
    appliance: E=Qw=Qa=1) where the operator named no size."""
    if args.ensemble_size is None:
        args.ensemble_size = max(1, min(3, writable))
    if args.write_quorum is None:
        args.write_quorum = min(2, args.ensemble_size)
    if args.ack_quorum is None:
        args.ack_quorum = min(2, args.write_quorum)


def _simpletest(args) -> int:
    from bookie.client import BookKeeper, BookKeeperError  # lazy: zmq
    say = _progress(args)
    keys = _client_keys(args)
    _with_store(args, lambda store: _simpletest_quorums(args, len(store.list_bookies())))
    try:
        with BookKeeper(_uri(args), keys) as bk:
            t0 = time.monotonic()
            password = os.urandom(16)  # the test ledger's own key: never the well-known empty one
            h = bk.create_ledger(args.ensemble_size, args.write_quorum, args.ack_quorum,
                                 password=password)
            for e in range(args.entries):
                h.add_entry(b"simpletest-%d" % e)
                if (e + 1) % 1000 == 0:
                    say(f"simpletest: {e + 1}/{args.entries} entries written")
            h.close()
            written_s = time.monotonic() - t0
            got = [x.data for x in bk.open_ledger(h.ledger_id, password=password).read_entries(0, args.entries - 1)] \
                if args.entries else []
            bk.delete_ledger(h.ledger_id)
    except BookKeeperError as e:
        raise CliError(f"simpletest failed: {e}{client_options.curve_hint(keys, e)}") from None
    ok = got == [b"simpletest-%d" % e for e in range(args.entries)]
    doc = {"ledger_id": h.ledger_id, "entries": args.entries, "ok": ok,
           "ensemble": bk_fragments(h), "write_s": round(written_s, 3)}
    if args.json:
        _print_json(doc)
    else:
        print(f"simpletest: {'OK' if ok else 'FAILED'}: {args.entries} entries written to and "
              f"read back from ledger {h.ledger_id} (E={args.ensemble_size} "
              f"Qw={args.write_quorum} Qa={args.ack_quorum}) in {written_s:.2f} s")
    return 0 if ok else 1


def bk_fragments(handle) -> list:
    try:
        return [list(e) for _, e in handle.metadata.fragments]
    except Exception:  # noqa: BLE001 - informational only
        return []


def _curve(args):
    """The CURVE keys of ``--client-conf`` / ``--set`` for raw bookie requests, or None."""
    from bookie.client.auth import client_curve  # lazy: zmq
    return client_curve(ClientConfig.build(_client_keys(args)))


def _bookiesanity(args) -> int:
    """Write and read on exactly one bookie: a ledger of E=1 whose ensemble is that bookie,
    written with the raw protocol, read back, then deleted."""
    from bookie.autorecovery.copier import Bookies, CopyError, Key  # lazy: zmq
    from bookie.client.digest import master_key, password_digest  # lazy: numpy
    from bookie import wire  # lazy: numpy

    bookie = args.bookie
    if not bookie and args.conf:
        bookie = BookieConfig.load(args.conf, check_dirs=False).bookie_id
    if not bookie:
        raise CliError("name the bookie: --bookie ID (host:port or its bookieId), or --conf its configuration file")
    curve = _curve(args)

    def body(store) -> int:
        with refused("bookiesanity"):
            require_bookies(store, [bookie])
        meta = LedgerMetadata(1, 1, 1, digest_type="dummy", password_digest=password_digest(b""),
                              custom={"bookiesanity": bookie}, fragments=[(0, [bookie])])
        ledger_id, version = store.create_ledger(meta)
        bookies = Bookies(args.timeout_s, curve, BookieResolver(store))
        key = master_key(b"")
        entries = [wire.pack_entry(ledger_id, e, e - 1, 8, b"", b"sanity%02d" % (e % 100))
                   for e in range(args.entries)]
        try:
            bookies.add_recovery(bookie, ledger_id, Key(key), entries)
            got = bookies.read_strided(bookie, ledger_id, 0, args.entries, 1)
            ok = got == entries
            error = "" if ok else f"read back {len(got)} of {len(entries)} entries, or different"
        except CopyError as e:
            ok, error = False, str(e)
        finally:
            bookies.close()
            store.remove_ledger(ledger_id)  # the bookie's GC drops what it stored
        if args.json:
            _print_json({"bookie": bookie, "ok": ok, "error": error})
        else:
            print(f"bookiesanity: {bookie}: " + ("OK" if ok else f"FAILED: {error}"))
        return 0 if ok else 1
    return _with_store(args, body)


def _bookieinfo(args) -> int:
    from bookie.autorecovery.copier import Bookies, CopyError  # lazy: zmq
    curve = _curve(args)

    def body(store) -> int:
        rows = []
        bookies = Bookies(min(args.timeout_s, 5.0), curve, BookieResolver(store))
        try:
            for readonly in (False, True):
                for bookie in store.list_bookies(readonly=readonly):
                    try:
                        info = bookies.info(bookie)
                        rows.append({"bookie": bookie, "readonly": readonly,
                                     "free_bytes": info.get("free_bytes"),
                                     "total_bytes": info.get("total_bytes")})
                    except CopyError as e:
                        rows.append({"bookie": bookie, "readonly": readonly, "error": str(e)})
        finally:
            bookies.close()
        unanswered = [row["bookie"] for row in rows if "error" in row]
        if args.json:
            _print_json({"bookies": rows})
            return 1 if unanswered else 0
        if not rows:
            print("no bookies registered")
        for row in rows:
            flag = " (read-only)" if row["readonly"] else ""
            if "error" in row:
                print(f"{row['bookie']}{flag}: no answer ({row['error']})")
            else:
                print(f"{row['bookie']}{flag}: free {row['free_bytes'] / 2**30:.2f} GiB of "
                      f"{row['total_bytes'] / 2**30:.2f} GiB")
        if unanswered:  # a registered bookie that does not answer is a failure to look at
            print(f"bookieinfo: {len(unanswered)} of {len(rows)} bookies did not answer"
                  f"{client_options.curve_hint(_client_keys(args))}", file=sys.stderr)
            return 1
        return 0
    return _with_store(args, body)


# -- cookies -----------------------------------------------------------------------------------

def _check_expansion(old: dict, new: dict) -> None:
    """expandstorage adds directories and changes nothing else."""
    if old.get("bookie_id") != new.get("bookie_id"):
        raise CliError(f"expandstorage adds directories only; the bookie id changes ("
                       f"{old.get('bookie_id')} -> {new.get('bookie_id')}): use updatecookie")
    if old.get("journal_dir") != new.get("journal_dir") or \
            old.get("journal_dirs") != new.get("journal_dirs"):
        # a ledger's journal is its id modulo their number (storage/journal_set.py)
        raise CliError("expandstorage adds ledger and index directories only; the journal "
                       "directories changed")
    for key in ("ledger_dirs", "index_dirs"):
        gone = set(old.get(key) or []) - set(new.get(key) or [])
        if gone:
            raise CliError(f"expandstorage adds directories only; the configuration no longer "
                           f"names {', '.join(sorted(gone))}")
    if old.get("ledger_dirs") == new.get("ledger_dirs") and \
            old.get("index_dirs") == new.get("index_dirs"):
        raise CliError("expandstorage: the configuration names no new directory")

def _updatecookie(args) -> int:
    """The cookie a bookie's configuration calls for now, written to its directories and the
    store; only changes of bookie id and added directories (the instance id is kept, and a
    directory that holds data without a cookie is refused)."""

    from bookie.appliance.startchecks import with_stamped_port  # lazy: lmdb

    if not args.conf:
        raise CliError(f"{'expandstorage' if getattr(args, 'expand_only', False) else 'updatecookie'}"
                       f" needs the bookie's configuration: --conf FILE")

    # bookiePort=0: the port of the cookie's id, or the id would be host:0 (issue 30)
    conf = with_stamped_port(BookieConfig.load(args.conf, parse_overrides(args.set),
                                               check_dirs=False))
    dirs = all_dirs(conf)
    if not args.list:
        _import_store_modules(_uri(args))
        _zk_security(args)  # the credentials file may be readable by root only: checked now
        run_as_owner(dirs, "updatecookie")
    found = {d: _read_json(os.path.join(current_dir(d), "cookie")) for d in dirs}
    cookies = [c for c in found.values() if c]
    if not cookies:
        raise CliError("no cookie in the bookie's directories: it was never started")
    old = cookies[0]
    if any(c.get("instance_id") != old.get("instance_id") for c in cookies):
        raise CliError("the directories hold cookies of different bookies; refusing")
    new = expected_cookie(conf, old.get("instance_id", ""), old.get(PUBLIC_KEY_FIELD))
    if getattr(args, "expand_only", False):
        _check_expansion(old, new)

    def body(store) -> int:
        old_id = old.get("bookie_id", "")
        try:
            stored = orjson.loads(store.read_cookie(old_id)[0])
        except CookieNotFoundError:
            stored = None
        if args.list:
            doc = {"directories": {d: c for d, c in found.items()}, "store": stored,
                   "wanted": new}
            if args.json:
                _print_json(doc)
            else:
                print(f"cookie of {old_id} in the directories: {orjson.dumps(old).decode()}")
                print(f"in the store: {orjson.dumps(stored).decode() if stored else 'none'}")
                print(f"this configuration calls for: {orjson.dumps(new).decode()}")
            return 0
        if args.delete:
            if not args.force:
                raise CliError("updatecookie --delete removes the store's cookie; add --force")
            try:
                store.remove_cookie(old_id)
            except CookieNotFoundError:
                raise CliError(f"no cookie of {old_id} in the store") from None
            print(f"cookie of {old_id} removed from the store")
            return 0
        check_not_in_use(conf, purpose="update its cookie")
        for d, c in found.items():
            if c is None and _has_data(current_dir(d)):
                raise CliError(f"{d}: holds data but no cookie; refusing")
        for d in dirs:
            cur = current_dir(d)
            os.makedirs(cur, exist_ok=True)
            _write_atomic(os.path.join(cur, "VERSION"), f"{LAYOUT_VERSION}\n".encode())
            _write_atomic(os.path.join(cur, "cookie"), orjson.dumps(new))
        try:
            version = store.read_cookie(conf.bookie_id)[1]
            store.write_cookie(conf.bookie_id, orjson.dumps(new), version)
        except CookieNotFoundError:
            store.write_cookie(conf.bookie_id, orjson.dumps(new))
        if conf.bookie_id != old_id:  # the old id stays "renamed", never gone (core.naming)
            rename.leave_rename_record(store, old_id, stored or old, conf.bookie_id)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if args.json:
            _print_json({"bookie_id": conf.bookie_id, "was": old_id, "changed": changed})
        else:
            print(f"cookie updated ({', '.join(changed) or 'nothing changed'})")
            if conf.bookie_id != old_id:
                print(f"ledgers still name {old_id}: rename it in them before the bookie "
                      f"starts: 'bookie shell updateledgers --from {old_id} --to "
                      f"{conf.bookie_id}' (no copy; 'recover {old_id}' would lose a "
                      f"write-quorum-1 ledger's only copy)")
        return 0
    return _with_store(args, body)
