"""Which bookies a ledger's metadata names, when it may stop naming one, and when a bookie may
drop the copies it holds of a ledger that no longer names it.  Plain code, no I/O: autorecovery
(``bookie.autorecovery.rules``, the replicator and the auditor) and the GC worker
(``bookie.workers.overreplicated``) obey these rules; nothing else decides them.

Theory of operation
-------------------
A ledger's metadata *names* a bookie when one of its fragments' ensembles holds it.  A reader
looks for entry ``e`` only on the bookies its fragment's ensemble names at ``e``'s write set;
so an entry is *reachable* while some named member of its write set holds it.  Whatever holds an
acknowledged entry must stay named until a named bookie holds it too, or the entry is cut off
although it still exists.

**When the metadata may stop naming bookie B at a position of a fragment** (``may_unname``):

- every entry B is expected to hold there was copied to the bookie that takes B's place
  (``copied_all``): the write set keeps a holder; or
- B's data is *gone for good* (``gone_for_good``): its cookie is no longer in the metadata store
  (``decommissionbookie`` after copying, ``bookie shell recover``, ``bookieformat``,
  ``cookie_delete``, ``updatecookie --delete``: an operator said its disks are gone or wiped), or
  an operator forced it (``bookie shell recover``, ``decommissionbookie`` run now).  An entry
  only B held is then lost whatever the metadata says; repointing cuts nothing off.

**A renamed bookie is never gone for good** (``renamed_to``).  The rename (stop B,
``updatecookie`` with its new id N, ``updateledgers --from B --to N``, start) moves B's disks,
every entry on them, to the id N.  ``updatecookie`` therefore does not remove B's cookie from
the store: it leaves it there as a record "renamed to N" (``rename_record``), and so B, which
the ledgers still name until ``updateledgers`` has run, is only *down*: nothing repoints a
position of B for want of copies, whatever the pause between the commands and whatever an
operator forces.  ``updateledgers`` removes the record only once no ledger names B any more
(``rename_finished``); then no metadata can lead anyone to B, and its id may be gone.  Its
ledgers keep being audited meanwhile like any down bookie's (a position whose entries all have
another live copy is still copied and repointed).  And a bookie started under N before
``updateledgers`` ran holds copies of ledgers that name it only as B: a ledger that names an id
renamed to this bookie names this bookie, so its copies are never over-replicated
(``LedgerView.names_old_id``).

Anything else keeps B named: a bookie that is only down (however long) may come back with
everything it held, and a position whose entries partly have no live copy (the other members of
their write set are down too) is not repointed, because the entries that only B holds would be
cut off from it when it returns (the nemesis, seed 777: a bookie down for seconds with
``lostBookieRecoveryDelay=0``).  Its entries that do have a live copy are copied as soon as
the position may be repointed: when the other members come back (then every entry has a source),
or when B is gone for good.  A bookie wiped and started empty under the same id must have its
cookie removed first (the supervisor refuses a wiped bookie whose cookie the store still holds),
so it passes through "gone for good"; once it runs again it is named and empty, and the entry
check (``auditorPeriodicCheckInterval``) copies back every entry it should hold that has a copy.

No give-up delay: a rule that repoints after a bookie was down for some time would cut off a
bookie that comes back after that time, and no interleaving may do that.

**When a bookie may drop its copies of a ledger** (``OverReplicated``, BookKeeper's
``gcOverreplicatedLedgerWaitTime``): only of a *closed* ledger whose metadata the bookie could
read and that names it in no fragment (it came back after it was healed around, or it was the
replacement a copy went to and the repoint never happened), that is not marked under-replicated
and not being replicated (no replication lock), and only when all that was true, with the same
entries held here, at every look for at least the wait.  The metadata is read again right
before the copies go (``may_drop``): an ensemble change that names the bookie (a replacement
adding it) stops the delete.  The copies go without a tombstone: the ledger is not deleted,
and the bookie may be chosen to hold it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


def named_bookies(fragments: Iterable) -> set[str]:
    """Every bookie named by ``fragments`` (``LedgerMetadata.fragments``: (first, ensemble))."""
    return {b for _, ensemble in fragments for b in ensemble}


RENAMED_TO = "renamed_to"  # the field of a rename record (a cookie left by updatecookie)


def renamed_to(stored_cookie) -> str | None:
    """The id a bookie was renamed to, when ``stored_cookie`` (its cookie in the store, parsed;
    None when absent) is a rename record; None otherwise."""
    if isinstance(stored_cookie, dict) and isinstance(stored_cookie.get(RENAMED_TO), str):
        return stored_cookie[RENAMED_TO]
    return None


def rename_record(old_cookie: dict, new_id: str) -> dict:
    """What ``updatecookie`` leaves in the store under the old id: its old cookie, marked as
    renamed to ``new_id`` (module docstring: a renamed bookie is never gone for good)."""
    return {**old_cookie, RENAMED_TO: new_id}


def rename_finished(ledgers_naming_old: int) -> bool:
    """Whether ``updateledgers`` may remove the rename record: no ledger names the old id."""
    return ledgers_naming_old == 0


def gone_for_good(cookie_in_store: bool, operator_forced: bool = False,
                  renamed: bool = False) -> bool:
    """Whether a bookie's data is known gone: its cookie left the store, or an operator
    forced its replacement; never a bookie renamed (its cookie is a rename record, and its
    data answers to the new id: module docstring)."""
    if renamed:
        return False
    return operator_forced or not cookie_in_store


def may_unname(copied_all: bool, gone: bool) -> bool:
    """Whether a fragment's position may stop naming its bookie: every entry it should hold
    there was copied to the replacement, or the bookie is gone for good (module docstring)."""
    return copied_all or gone


# -- over-replicated copies (the GC) ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LedgerView:
    """What the GC knows of one ledger it holds: its metadata (``None``: unreadable or
    absent), whether it is marked under-replicated or locked for replication, and a token of
    what this bookie holds of it (its entry count and last entry: a copy arriving changes it)."""

    fragments: tuple | None
    closed: bool
    busy: bool  # marked under-replicated or a replication lock held
    held: tuple
    # it names an id whose cookie in the store is a rename record to this bookie: mid-rename,
    # before ``updateledgers`` (module docstring), the ledger names this bookie by its old id
    names_old_id: bool = False


def over_replicated(view: LedgerView, me: str) -> bool:
    """Whether this bookie's copies of the ledger are candidates for the GC: closed metadata it
    could read, naming ``me`` in no fragment (nor an old id of ``me``), and no replication
    around it."""
    if view.fragments is None or not view.closed or view.busy or view.names_old_id:
        return False
    return me not in named_bookies(view.fragments)


def may_drop(view: LedgerView, me: str, seen_held: tuple) -> bool:
    """The last check, on metadata read again right before the delete: still a candidate,
    and this bookie holds exactly what it held when the candidate was first seen."""
    return over_replicated(view, me) and view.held == seen_held


class OverReplicated:
    """Candidates seen over time: ``observe`` at every look; a ledger is due once it was a
    candidate, holding the same entries, at every look for at least ``wait_s`` seconds."""

    def __init__(self, wait_s: float):
        self.wait_s = float(wait_s)
        self.since: dict[int, tuple[float, tuple]] = {}  # ledger -> (first seen, held then)

    def observe(self, now_s: float, views: dict[int, LedgerView], me: str) -> list[int]:
        """Update from ``views`` (every ledger this bookie holds, looked at now); returns the
        ledgers due for the delete check (ascending)."""
        keep = {}
        for ledger_id, view in views.items():
            if not over_replicated(view, me):
                continue
            first, held = self.since.get(ledger_id, (now_s, view.held))
            if held != view.held:  # a copy arrived meanwhile: start again
                first, held = now_s, view.held
            keep[ledger_id] = (first, held)
        self.since = keep
        return sorted(lid for lid, (first, _) in keep.items() if now_s - first >= self.wait_s)

    def held_when_seen(self, ledger_id: int) -> tuple | None:
        found = self.since.get(ledger_id)
        return None if found is None else found[1]

    def forget(self, ledger_id: int) -> None:
        self.since.pop(ledger_id, None)
