"""Several journals (``journalDirectories``): which journal a ledger's records go to, and the
names each journal's files, marks, worker and doorbell go by.

Theory of operation
-------------------
A bookie has ``n`` journals, journal ``i`` in ``conf.journal_dirs[i]`` (journal 0 is
``journalDirectory`` when only that is set).  Each journal has its own journal worker (role
``journal`` for journal 0, ``journal-i`` for the others), its own shared-memory ring to the add
worker, and its own logical offsets: the offsets of two journals never meet, so a mark, a ring
cursor or a group start is always read together with the journal it belongs to.

Invariants
----------
1. Every record of a ledger (its adds, fences, explicit LACs) goes to journal
   ``journal_of(ledger_id, n)``, a function of the ledger id alone: a ledger's records are in
   one journal, in the order they were placed, so replaying each journal in its own order
   replays every ledger in its order, whatever order the journals are replayed in.
2. ``n`` never changes under a bookie's data: the journal directories are in the cookie
   (``storage/layout.py``), so a start with one more, one fewer or two swapped is refused, and
   a ledger never finds its older records in another journal than its newer ones.
3. Each journal has its own LastLogMark, persisted in every ledger directory: journal 0's in
   ``lastMark`` (the one-journal file, unchanged), journal ``i``'s in ``lastMark.i``.  A journal
   file is deleted only when it is wholly before its own journal's mark.
"""

from __future__ import annotations

JOURNAL_ROLE = "journal"


def journal_of(ledger_id: int, n: int) -> int:
    """The journal every record of ``ledger_id`` goes to (BookKeeper's rule: the ledger id
    modulo the number of journals; ids are non-negative)."""
    return ledger_id % n if n > 1 else 0


def role(i: int) -> str:
    """The worker role (and process title) of journal ``i``."""
    return JOURNAL_ROLE if i == 0 else f"{JOURNAL_ROLE}-{i}"


def roles(n: int) -> tuple[str, ...]:
    return tuple(role(i) for i in range(n))


def index_of_role(name: str) -> int | None:
    """The journal a worker role names (``journal`` -> 0, ``journal-2`` -> 2), or None."""
    if name == JOURNAL_ROLE:
        return 0
    prefix = JOURNAL_ROLE + "-"
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        i = int(name[len(prefix):])
        return i if i > 0 and str(i) == name[len(prefix):] else None
    return None


def lastmark_name(i: int) -> str:
    """The file, in each ledger directory, holding journal ``i``'s LastLogMark."""
    return "lastMark" if i == 0 else f"lastMark.{i}"


def bell_name(i: int) -> str:
    """The doorbell (in the run directory) the add worker rings for journal ``i``."""
    return "journal.bell" if i == 0 else f"journal-{i}.bell"
