"""Whether a bookie serves a normal add or a fence for a ledger, by whether the ledger's
metadata names it (issue 30, item 6).  Plain code, no I/O: the add worker and the read worker
ask ``verdict`` and do what it says; nothing else decides it.

Invariants
----------
1. A normal add (no RECOVERY_ADD flag) or a fence of a ledger is served only while the ledger's
   metadata names this bookie in some fragment's ensemble: an address mix-up (a client that
   reached this bookie in another's place) never becomes an acknowledgement or a fence.
2. A refusal is decided only on metadata read from the store for this request (``fresh``):
   a cached copy that does not name the bookie asks for a fresh read (``REREAD``) first, never
   a refusal, because an ensemble change may have named it since the cache was filled.
3. A recovery add (RECOVERY_ADD: a recovering writer's re-replication, autorecovery's copy,
   with the master key or the cluster recovery credential) is always allowed here: a copy
   arrives before the metadata names its target.  Its other checks (key, fence) still apply.
4. Reads, read-LACs without FENCE, WRITE_LAC and INFO are outside this rule (``ALLOW``); so is a
   ledger the store does not know (``names`` None): the ledger rule book
   (``bookie.core.ledgers``) answers those.

How the add worker calls it: for each ADD (and the read worker for each FENCE), with the
ledger's metadata from its owner cache, ``verdict(op, flags, names(meta, bookie_id), fresh=
False)``; on ``REREAD`` park the request as for an unknown owner, read the ledger's metadata
from the store off the loop, and ask again with ``fresh=True``; on ``REFUSE`` answer
UNAUTHORIZED (nothing stored, nothing journaled) and log the ledger and the peer once.
"""

from __future__ import annotations

import enum
from typing import Iterable

from bookie.wire import Flag, Op

class Verdict(enum.Enum):
    ALLOW = "allow"
    REREAD = "reread"  # read the metadata from the store, then ask again with fresh=True
    REFUSE = "refuse"  # answer UNAUTHORIZED: the metadata does not name this bookie


def names(fragments: Iterable | None, bookie_id: str) -> bool | None:
    """Whether ``fragments`` (``[(first_entry_id, ensemble), ...]``) name ``bookie_id``; None
    when there is no metadata (a ledger the store does not know)."""
    if fragments is None:
        return None
    return any(bookie_id in ensemble for _, ensemble in fragments)


def verdict(op: int, flags: int, named: bool | None, fresh: bool) -> Verdict:
    """What to do with a request (module doc, invariants 1-4).

    Args:
        op, flags: the request's op code and flags (``bookie.wire``).
        named: ``names(...)`` of the metadata at hand (None: the store knows no such ledger).
        fresh: the metadata was read from the store for this request.
    """
    guarded = (op == Op.ADD and not flags & Flag.RECOVERY_ADD) or \
        (op in (Op.READ, Op.READ_LAC) and flags & Flag.FENCE)
    if not guarded or named is None or named:
        return Verdict.ALLOW
    return Verdict.REFUSE if fresh else Verdict.REREAD
