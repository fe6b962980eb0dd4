"""When a reader's view of a ledger's metadata is too old for what it was told, and whether a
fresh view is worth reading again with (issue 21, defect 1).

Theory of operation
-------------------
A reader that does not recover the ledger keeps the metadata it opened with, and learns the
last-add-confirmed (LAC) from the bookies of that view's last fragment.  Meanwhile the writer may
have replaced bookies: entries from some id on live in a new fragment the reader's view does
not have.  The bookies of the old last fragment still answer (a LAC told by one that kept
getting entries, NO_ENTRY for the entries that went elsewhere), so the reader is told a LAC n
and then finds n "on none of its replicas".  That answer is a fact about the view, not about
the ledger: an entry at or below a LAC someone confirmed exists on Qa bookies of *its*
fragment, so every replica of the view's write set denying it (or failing to answer) means
the view is stale.

The rules, as plain functions over the facts:

* ``refresh_wanted(error, last_entry_id, told_lac)``: a read of entries up to ``last_entry_id``
  failed with ``error`` after trying every replica.  Re-read the metadata when the entries are
  at or below the LAC this reader was told (so they exist) and the failure is one a newer
  ensemble can cure: every replica denied the entry (NoSuchEntryError), or the replicas failed
  or did not answer (BookieError, BKTimeoutError: bookies replaced since).  Never for a bad
  copy (DigestMismatchError) or a refusal (UnauthorizedError): a new view changes neither.
* ``worth_retrying(read_with, fresh, first, last)``: read again only if the fresh view puts
  some entry of ``first``..``last`` on another ensemble than the view the read used; otherwise
  the same replicas would give the same answer, and the error stands.

Each retry follows a fresh read of the store whose fragments differ for the range, so a reader
retries at most once per ensemble change that touched the range: no loop.

* ``wakes_a_poll(held, seen)``: a tailing reader's long poll waits on the bookies of its view's
  last fragment, and they never learn that the ledger ended: its last entry is confirmed by no
  later add, and a close is a metadata write.  So the reader watches the metadata while it
  polls, and a record seen there (``seen``) ends the poll early when it moves the ledger on from
  the view it holds: closed (its last entry is now known), in recovery (a recovery will close
  it), or a new fragment (the poll asks the wrong bookies).  The view only moves forward: a
  watch delivery older than a fresh read is ignored.
"""

from __future__ import annotations

from bookie.client.errors import (BKTimeoutError, BookieError, DigestMismatchError,
                                  NoSuchEntryError, UnauthorizedError)
from bookie.client.protocol.ledger import LedgerInfo, LedgerState

_STAGE = {LedgerState.OPEN: 0, LedgerState.IN_RECOVERY: 1, LedgerState.CLOSED: 2}


def refresh_wanted(error: BaseException, last_entry_id: int, told_lac: int) -> bool:
    """Whether a read that failed with ``error`` should re-read the ledger's metadata.

    Args:
        error: how the read of entries up to ``last_entry_id`` failed.
        told_lac: the highest LAC this reader was told (by the bookies or the metadata).
    Returns:
        True when every entry of the read is confirmed (at or below ``told_lac``) and the
        failure is a missing entry or failed / silent replicas.
    """
    if last_entry_id > told_lac:
        return False
    if isinstance(error, (DigestMismatchError, UnauthorizedError)):
        return False
    return isinstance(error, (NoSuchEntryError, BookieError, BKTimeoutError))


def _ensembles(info: LedgerInfo, first: int, last: int) -> list:
    """(first entry id, ensemble) of each fragment overlapping ``first``..``last``, clipped."""
    out = []
    frags = info.fragments
    for k, (ffirst, ens) in enumerate(frags):
        nxt = frags[k + 1][0] if k + 1 < len(frags) else last + 1
        lo, hi = max(ffirst, first), min(nxt - 1, last)
        if lo <= hi and not (out and out[-1][1] == tuple(ens)):  # a cut that moved nothing
            out.append((lo, tuple(ens)))
    return out


def worth_retrying(read_with: LedgerInfo, fresh: LedgerInfo, first: int, last: int) -> bool:
    """Whether ``fresh`` places some entry of ``first``..``last`` on another ensemble than
    ``read_with`` did (so a read with ``fresh`` may succeed where the other failed)."""
    return _ensembles(read_with, first, last) != _ensembles(fresh, first, last)


def wakes_a_poll(held: LedgerInfo, seen: LedgerInfo) -> bool:
    """Whether the record ``seen`` (a watch's delivery) is ahead of the view ``held``: a later
    state (OPEN -> IN_RECOVERY -> CLOSED), or the same state with more fragments."""
    stage, now = _STAGE[LedgerState(seen.state)], _STAGE[LedgerState(held.state)]
    return stage > now or (stage == now and len(seen.fragments) > len(held.fragments))
