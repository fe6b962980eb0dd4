"""``bookie shell updateledgers``: rename a bookie id in every ledger's metadata (BookKeeper's
``updateledgers`` / ``UpdateLedgerOp.updateBookieIdInLedgers``), without copying any entry.

    bookie shell updateledgers --from OLD_ID --to NEW_ID [--dry-run]

The documented rename of a bookie (docs/appliance.md): stop it, ``updatecookie`` with its new
id, ``updateledgers --from OLD --to NEW``, start it.  The bookie still holds every entry it held
under its old id; renaming it in the ensembles makes them reachable again, where re-replication
(``recover OLD``) could not heal a write-quorum-1 ledger whose only copy is on that bookie.

Each ledger is rewritten with compare-and-swap (a writer's concurrent change is read again and
the rename applied to it); a ledger whose ensemble already names NEW_ID beside OLD_ID is left
alone and reported (one bookie cannot stand twice in an ensemble).

The order that loses nothing, whatever the pause between the steps (``bookie.core.naming``: a
renamed bookie is never gone for good):

1. ``updatecookie`` writes NEW_ID's cookie, and leaves OLD_ID's cookie in the store as a record
   "renamed to NEW_ID" (``leave_rename_record``) instead of removing it: autorecovery sees OLD_ID
   as down, never gone for good, so it repoints no position whose entries only OLD_ID holds.
2. ``updateledgers`` needs NEW_ID's cookie in the store (a ledger naming an id without a cookie
   *is* gone for good to autorecovery), renames OLD_ID in every ledger, and removes the record
   only once no ledger names OLD_ID any more; otherwise it keeps it and says so (run it again).
3. The bookie starts under NEW_ID (before step 2 it would hold copies of ledgers that name it
   nowhere yet, which its GC may drop as over-replicated after ``gcOverreplicatedLedgerWaitTime``).

A writer with the ledger open meanwhile keeps the new name: its next ensemble change, losing its
compare-and-swap to step 2, applies its change to the renamed metadata.
"""

from __future__ import annotations

import argparse

import orjson

from bookie.appliance.errors import CliError
from bookie.appliance.shell.registry import with_store as _with_store
from bookie.core import naming
from bookie.metadata import BadVersionError, CookieNotFoundError, NoSuchLedgerError
from bookie.metadata.bookie_ids import bookie_id_problem


def register(commands, metadata_command) -> None:
    p = metadata_command("updateledgers", "Rename a bookie id in every ledger's metadata (its "
                         "ensembles), without copying entries: after 'updatecookie' renamed a "
                         "stopped bookie, so its ledgers find it under its new id.",
                         _updateledgers)
    p.add_argument("--from", dest="old_id", required=True, metavar="OLD_ID",
                   help="the id the ledgers name now")
    p.add_argument("--to", dest="new_id", required=True, metavar="NEW_ID",
                   help="the bookie's id now (its cookie's)")
    p.add_argument("--dry-run", action="store_true", help="count the ledgers only")


def renamed(fragments, old_id: str, new_id: str):
    """``fragments`` with ``old_id`` replaced by ``new_id`` in every ensemble; None when no
    ensemble names ``old_id``.  Raises ValueError when an ensemble naming ``old_id`` already
    names ``new_id``."""
    if not any(old_id in ensemble for _, ensemble in fragments):
        return None
    out = []
    for first, ensemble in fragments:
        if old_id in ensemble and new_id in ensemble:
            raise ValueError(f"the ensemble from entry {first} names both {old_id} and {new_id}")
        out.append((first, [new_id if b == old_id else b for b in ensemble]))
    return out


def update_ledgers(store, old_id: str, new_id: str, dry_run: bool = False
                   ) -> tuple[list[int], list[str]]:
    """Rename ``old_id`` to ``new_id`` in every ledger of ``store``; returns (ledger ids
    renamed, or that would be with ``dry_run``; one line per ledger left alone)."""
    done, skipped = [], []
    for ledger_id in list(store.list_ledgers()):
        while True:
            try:
                meta, version = store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                break  # deleted meanwhile
            try:
                fragments = renamed(meta.fragments, old_id, new_id)
            except ValueError as e:
                skipped.append(f"ledger {ledger_id}: {e}; left alone")
                break
            if fragments is None:
                break
            if dry_run:
                done.append(ledger_id)
                break
            meta.fragments = fragments
            try:
                store.write_ledger(ledger_id, meta, version)
            except BadVersionError:
                continue  # changed meanwhile: rename what it is now
            except NoSuchLedgerError:
                break
            done.append(ledger_id)
            break
    return done, skipped


def leave_rename_record(store, old_id: str, old_cookie: dict, new_id: str) -> None:
    """``updatecookie``'s step for a new id: OLD's cookie in the store becomes a record
    "renamed to NEW" (written, or rewritten with compare-and-swap), never removed here."""
    record = orjson.dumps(naming.rename_record(old_cookie, new_id))
    try:
        version = store.read_cookie(old_id)[1]
    except CookieNotFoundError:
        store.write_cookie(old_id, record)
        return
    store.write_cookie(old_id, record, version)


def finish_rename(store, old_id: str, new_id: str, left: int) -> str:
    """After the ledgers were renamed: remove OLD's rename record when no ledger names OLD
    (``left`` is how many still do) and the record points to NEW.  Returns a line to print."""
    try:
        raw, version = store.read_cookie(old_id)
    except CookieNotFoundError:
        return ""
    try:
        target = naming.renamed_to(orjson.loads(raw))
    except ValueError:
        target = None
    if target != new_id:
        return ""
    if not naming.rename_finished(left):
        return (f"updateledgers: {left} ledger(s) still name {old_id}: its record 'renamed to "
                f"{new_id}' stays in the store; run updateledgers again")
    try:
        store.remove_cookie(old_id, version)
    except (CookieNotFoundError, BadVersionError):
        return ""
    return f"updateledgers: the record '{old_id} renamed to {new_id}' is removed: the rename is done"


def _updateledgers(args: argparse.Namespace) -> int:
    for what, value in (("--from", args.old_id), ("--to", args.new_id)):
        problem = bookie_id_problem(value)
        if problem:
            raise CliError(f"updateledgers: {what} {value!r} {problem}")
    if args.old_id == args.new_id:
        raise CliError("updateledgers: --from and --to name the same id")

    def body(store) -> int:
        try:
            store.read_cookie(args.new_id)
        except CookieNotFoundError:
            raise CliError(f"updateledgers: the store holds no cookie of {args.new_id}: run "
                           f"'updatecookie' with the new id first (a ledger naming an id without "
                           f"a cookie is gone for good to autorecovery)") from None
        done, skipped = update_ledgers(store, args.old_id, args.new_id, args.dry_run)
        for line in skipped:
            print(f"updateledgers: {line}")
        verb = "would rename" if args.dry_run else "renamed"
        print(f"updateledgers: {verb} {args.old_id} to {args.new_id} in {len(done)} ledger(s)")
        if not args.dry_run:
            line = finish_rename(store, args.old_id, args.new_id, len(skipped))
            if line:
                print(line)
        return 0
    return _with_store(args, body)
