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
"""

from __future__ import annotations

from bookie.client.errors import (BKTimeoutError, BookieError, DigestMismatchError,
                                  NoSuchEntryError, UnauthorizedError)
from bookie.client.protocol.ledger import LedgerInfo


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
