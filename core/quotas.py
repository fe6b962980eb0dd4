"""Storage quotas per writer identity (``ledgerStorageQuotaBytes``): who a ledger's bytes count
to, what that identity uses, and which adds the quota refuses.

Theory of operation
-------------------
A bookie with ``ledgerStorageQuotaBytes`` > 0 bounds the bytes it stores for the ledgers of one
writer identity.  The identity of a ledger (``identity_of``):

- an **enrolled CURVE key** (the principal of ``bookie.workers.auth``: its z85 User-Id): the
  key whose add (of any kind, RECOVERY_ADD included; not the recovery principal's) first
  reached this bookie for the ledger (``bind``); it stays the ledger's identity for good,
  whoever adds later (only a holder of the ledger's master key can);
- otherwise the **ledger's owner** as the rule book knows it (``bookie.core.ledgers``: its
  binding, the stored form of its master key, which is per ledger): the ledger itself.  An
  ephemeral client key is never an identity, nor is an address (many clients share one).
  Without enrolment the quota therefore bounds each ledger, not a writer who makes many.

What counts is what the bookie holds: the bytes of every ledger not deleted, as the entry logs'
ledger maps in the index count them (entries and the fence and LAC records; copies and
recovery adds too: they are the ledger's bytes, whoever wrote them).

Invariants
----------
1. **Usage is derived state.**  At every moment
   ``usage[i] == sum(ledger_bytes[l] for every ledger l whose identity is i)``, and
   ``ledger_bytes`` is what the bookie holds: ``reset`` sets it from the index (at start, after
   the journal's replay; and again after a commit at most every ``RESYNC_S``, which is how a
   deleted ledger's bytes come back to its identity once the GC has deleted it, and how the
   over-replicated drop, compaction and an index rebuild are followed), and ``stored`` adds
   what the add worker stored since.  No path keeps a count of its own.
2. **What the quota may refuse** (``quota_exempt``, ``check``): an add (normal or
   RECOVERY_ADD: the flag is the client's to set, issue 39 item 2) whose bytes would take its
   ledger's identity past the quota is refused OVER_QUOTA and nothing is stored.  Never
   refused: the recovery principal's adds (the recovery credential, an admin key:
   autorecovery, the shell's recovery), a recovery add to a ledger this bookie holds fenced
   (a recovering reader closing it: the writer can add no more), fences and WRITE_LACs:
   healing never fails for a quota, and a fence must always pass.  Their bytes still count.
3. **Other identities are unaffected**: a refusal depends on the ledger's identity's usage
   alone.
4. **Identities are persisted** (the add worker's ``storage/writers.py``) before an add of the
   ledger is answered, outside the index, so a restart and an index rebuild keep them.  A
   ledger whose identity was lost (a machine crash before the write reached the disk) counts
   to its owner: the quota may then see it as its own identity, never lose its bytes.

Plain code: no I/O, no clock.
"""

from __future__ import annotations

from bookie.core.ledgers import Rejected
from bookie.wire import Status

RESYNC_S = 2.0  # the add worker's ``reset`` from the index, at most this often (after a commit)


def quota_exempt(recovery: bool, recovery_principal: bool, fenced: bool) -> bool:
    """Whether an add is never refused for a quota (invariant 2): the recovery principal's
    (``recovery_principal``: the recovery credential or an admin key), or a recovery add to a
    ledger this bookie holds ``fenced``."""
    return recovery_principal or (recovery and fenced)


def ledger_identity(ledger_id: int) -> tuple:
    """The identity of a ledger with no enrolled key: its own owner."""
    return ("ledger", ledger_id)


class Quotas:
    """Usage per writer identity and the quota rule (module docstring).  ``limit_bytes``: 0
    means no quota (nothing is ever refused, usage is still kept)."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self.ledger_bytes: dict[int, int] = {}
        self.identities: dict[int, str] = {}  # ledger -> enrolled key (persisted)
        self.usage: dict = {}
        self.refused_total = 0
        self.unsaved: dict[int, str] = {}  # bound since the caller last persisted
        self.refused: dict = {}  # identity -> its usage when an add of it was last refused

    # -- identities ------------------------------------------------------------------------------
    def identity_of(self, ledger_id: int):
        key = self.identities.get(ledger_id)
        return ("key", key) if key is not None else ledger_identity(ledger_id)

    def bind(self, ledger_id: int, principal: str | None) -> None:
        """An add of ``ledger_id`` from writer ``principal`` (an enrolled key, None: none) was
        taken: the ledger's identity is that key unless it has one already.  Its bytes move
        from the ledger's own identity to the key's."""
        if principal is None or ledger_id in self.identities:
            return
        n = self.ledger_bytes.get(ledger_id, 0)
        self._count(ledger_identity(ledger_id), -n)
        self.identities[ledger_id] = principal
        self.unsaved[ledger_id] = principal
        self._count(("key", principal), n)

    # -- the rule (invariant 2) --------------------------------------------------------------------
    def check(self, ledger_id: int, principal: str | None, nbytes: int) -> None:
        """An add (not exempt: ``quota_exempt``) of ``nbytes`` to ``ledger_id`` by ``principal``.  Raises
        Rejected(OVER_QUOTA) when it would take the ledger's identity past the quota."""
        if not self.limit_bytes:
            return
        key = self.identities.get(ledger_id, principal)
        identity = ("key", key) if key is not None else ledger_identity(ledger_id)
        used = self.usage.get(identity, 0)
        if used + nbytes > self.limit_bytes:
            self.refused_total += 1
            self.refused[identity] = used
            raise Rejected(Status.OVER_QUOTA,
                           f"the writer's ledgerStorageQuotaBytes ({self.limit_bytes}) is used up")

    # -- what is held (invariant 1) ----------------------------------------------------------------
    def stored(self, ledger_id: int, nbytes: int) -> None:
        """The add worker stored ``nbytes`` more of ``ledger_id`` (any add, fence, LAC)."""
        if nbytes:
            self.ledger_bytes[ledger_id] = self.ledger_bytes.get(ledger_id, 0) + nbytes
            self._count(self.identity_of(ledger_id), nbytes)

    def reset(self, ledger_bytes: dict[int, int]) -> None:
        """What the bookie holds now, ledger -> bytes (deleted ledgers left out); usage is
        recomputed from it.  Identities of ledgers no longer held are forgotten (returned by
        ``forgotten``, for the caller to drop from its store)."""
        self.ledger_bytes = {lid: n for lid, n in ledger_bytes.items() if n > 0}
        usage: dict = {}
        for lid, n in self.ledger_bytes.items():
            i = self.identity_of(lid)
            usage[i] = usage.get(i, 0) + n
        self.usage = usage
        # a refused identity counts as at its quota until what it holds goes down
        # (an identity that holds nothing is forgotten: the dict stays bounded by what is held)
        self.refused = {i: u for i, u in self.refused.items() if usage.get(i, 0) >= max(u, 1)}

    def forgotten(self, deleted) -> list[int]:
        """Drop the identities of ``deleted`` ledgers (ids are never reused); returns those
        dropped."""
        gone = [lid for lid in deleted if lid in self.identities]
        for lid in gone:
            del self.identities[lid]
            self.unsaved.pop(lid, None)
        return gone

    def over(self) -> int:
        """Identities at or over the quota (0 without one): holding the quota or more, or
        refused an add since what they hold last went down."""
        if not self.limit_bytes:
            return 0
        over = {i for i, n in self.usage.items() if n >= self.limit_bytes}
        return len(over | self.refused.keys())

    def _count(self, identity, n: int) -> None:
        if not n:
            return
        v = self.usage.get(identity, 0) + n
        if v:
            self.usage[identity] = v
        else:
            self.usage.pop(identity, None)
