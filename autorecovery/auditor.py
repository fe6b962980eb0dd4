"""The auditor's I/O around ``rules``: membership from the store, marks and reports into it.

Only the elected auditor runs ``Auditor.tick``.  Each tick reads the registered bookies (cheap);
a full pass over the ledgers runs when the set of lost bookies changed, a bookie came back, an
operator triggered an audit, or ``auditorPeriodicBookieCheckInterval`` elapsed.  An entry check
(``auditorPeriodicCheckInterval``, or a trigger) reads every closed ledger's entries from each
bookie of their write sets and copies back any that is missing (``Replicator.fill``).  A full pass
marks every ledger that names a lost bookie, reports (once) those with entries left on no live
bookie, and settles marks that are stale (``rules.settle_mark``).  Each tick also reads the
cookies of the lost bookies: one whose cookie left the store is gone for good
(``core.naming``), and a change of that set runs a full pass too, so a ledger whose lost
bookie was kept named (a partial loss) is marked again for the worker to repoint.

After a bookie is lost, and after this auditor is elected (it took over from one that may have
been lost: a bookie it never saw registered becomes lost only once a ledger it lists names it),
the full pass repeats every ``LOST_RECHECK_S`` for ``LOST_WINDOW_S``, and for as long as the last
pass marked a ledger: a pass sees the ledgers listed when it ran, and a
ledger that comes to name a lost bookie after it (created or changed by a client whose list of
bookies was not fresh yet, listed a moment late, or left unhealed by a worker that gave up on it)
was otherwise marked only at the next change of membership: in the nemesis, never, and a ledger
kept one copy of entries for good (issue 32: 120 s after a bookie lost for good).

A new auditor starts with an empty ``Membership``: a bookie already gone is timed from the
moment the new auditor sees it gone, and one it never saw registered waits at least
``unseen_grace_s`` (the store's session timeout: long enough for a starting cluster's bookies to
register), so a takeover can only lengthen the delay, never shorten it.
"""

from __future__ import annotations

import time

from bookie.autorecovery import cookies, rules
from bookie.metadata import NoSuchLedgerError
from bookie.metadata.errors import CorruptMetadataError
from bookie.metadata.underreplication import UnderReplication


LOST_RECHECK_S = 10.0   # a full pass at least this often while a recent loss is being healed
LOST_WINDOW_S = 300.0   # ... for this long after a bookie is lost


class Auditor:
    def __init__(self, store, delay_s: float, bookie_check_interval_s: float = 86400.0,
                 log=None, clock=time.monotonic, check_interval_s: float = 0.0, fill=None,
                 unseen_grace_s: float = 0.0):
        self.store = store
        self.ur = UnderReplication(store)
        self.membership = rules.Membership(delay_s, unseen_grace_s)
        self.configured_delay_s = float(delay_s)
        self.bookie_check_interval_s = bookie_check_interval_s
        self.log = log or (lambda event, **fields: None)
        self.clock = clock
        self._last_lost: set[str] | None = None
        self._last_gone: set[str] = set()
        self._last_registered: set[str] = set()
        self._last_full = None
        self._trigger = self.ur.audit_trigger()
        # the periodic entry check (auditorPeriodicCheckInterval): fill(ledger_id) -> copies
        self.check_interval_s = check_interval_s
        self.fill = fill
        self._last_check = clock()
        self.marked_total = 0
        self.lost_reported_total = 0
        self._lost_at: dict[str, float] = {}  # when each lost bookie was first seen lost
        self._elected_at = clock()
        self._marked_last = False  # the last full pass marked a ledger

    def registered(self) -> set[str]:
        return self.store.registered_bookies()

    def tick(self) -> bool:
        """One look at membership; a full pass when due.  Returns True if a pass ran."""
        now = self.clock()
        set_in_store = self.ur.recovery_delay_s()  # lostbookierecoverydelay -set, over ours
        self.membership.delay_s = self.configured_delay_s if set_in_store is None else set_in_store
        registered = self.registered()
        self.membership.observe(now, registered)
        lost = self.membership.lost(now)
        gone = self.gone_for_good(lost)
        trigger = self.ur.audit_trigger()
        due = (self._last_full is None or lost != self._last_lost or gone != self._last_gone
               or (registered - self._last_registered) or trigger != self._trigger
               or (self.bookie_check_interval_s > 0
                   and now - self._last_full >= self.bookie_check_interval_s)
               or self._recheck_due(now, lost))
        self._last_registered = registered
        triggered = trigger != self._trigger
        if due:
            self._trigger = trigger
            self.full_pass(now, registered)
        if self.fill is not None and (triggered or (
                self.check_interval_s > 0 and now - self._last_check >= self.check_interval_s)):
            self._last_check = now
            self.entry_check()
        return bool(due)

    def _recheck_due(self, now: float, lost: set[str]) -> bool:
        """A repeat of the full pass while healing after a loss (module docstring)."""
        for bookie in lost:
            self._lost_at.setdefault(bookie, now)
        for bookie in set(self._lost_at) - lost:
            del self._lost_at[bookie]
        recent = now - self._elected_at < LOST_WINDOW_S or \
            any(now - t < LOST_WINDOW_S for t in self._lost_at.values())
        return (recent or self._marked_last) and self._last_full is not None \
            and now - self._last_full >= LOST_RECHECK_S

    def gone_for_good(self, lost: set[str]) -> set[str]:
        """Those of ``lost`` whose data is gone for good (``autorecovery.cookies``)."""
        return cookies.gone_for_good(self.store, lost)

    def entry_check(self) -> int:
        """Every closed, unmarked ledger: each entry on each live bookie of its write set."""
        marked = set(self.ur.marks())
        filled = 0
        for ledger_id in list(self.store.list_ledgers()):
            if ledger_id not in marked:
                filled += self.fill(ledger_id)
        self.log("entry check done", copies_restored=filled)
        return filled

    def full_pass(self, now: float, registered: set[str]) -> None:
        ledgers = {}
        for ledger_id in list(self.store.list_ledgers()):
            try:
                ledgers[ledger_id] = self.store.read_ledger(ledger_id)[0]
            except NoSuchLedgerError:
                continue
            except CorruptMetadataError as e:
                self.log("ledger metadata unreadable; skipped", level="warning",
                         ledger_id=ledger_id, error=str(e))
        known = set().union(*(rules.named_bookies(m) for m in ledgers.values())) if ledgers else set()
        self.membership.observe(now, registered, known)
        lost = self.membership.lost(now)
        gone = self.gone_for_good(lost)
        if gone != self._last_gone and gone:
            self.log("lost bookies gone for good (no cookie)", bookies=",".join(sorted(gone)))
        self._last_gone = gone
        if lost != self._last_lost and lost:
            self.log("bookies lost", bookies=",".join(sorted(lost)),
                     delay_s=self.membership.delay_s)
        self._last_lost = lost
        self._last_full = now
        reported = self.ur.lost()
        self._marked_last = False
        for ledger_id, meta in ledgers.items():
            audit = rules.audit_ledger(meta, lost, gone)
            if audit.lost_ranges:
                if ledger_id not in reported and self.store.ledger_exists(ledger_id) and \
                        self.ur.report_lost(ledger_id, {
                            "reason": "no live copy", "missing": list(audit.missing),
                            "ranges": [list(r) for r in audit.lost_ranges]}):
                    self.lost_reported_total += 1
                    self.log("ledger lost entries: no live copy to heal from", level="error",
                             ledger_id=ledger_id, missing=",".join(audit.missing),
                             ranges=";".join(f"{a}-{b}" for a, b in audit.lost_ranges))
            # marked only while a worker has something to copy: a fragment left with no live
            # copy is reported above, never retried
            if audit.mark and self.ur.mark(ledger_id, list(audit.missing)):
                self._marked_last = True
                self.marked_total += 1
                self.log("ledger marked under-replicated", ledger_id=ledger_id,
                         missing=",".join(audit.missing))
        for ledger_id, missing in self.ur.marks().items():
            reason = rules.settle_mark(missing, ledgers.get(ledger_id), registered)
            if reason == rules.DROP_DELETED and ledger_id not in ledgers:
                try:  # listed before it was created? read it once more
                    ledgers[ledger_id] = self.store.read_ledger(ledger_id)[0]
                    reason = rules.settle_mark(missing, ledgers[ledger_id], registered)
                except NoSuchLedgerError:
                    pass
            if reason != rules.KEEP and self.ur.lock_holder(ledger_id) is None:
                if self.ur.unmark(ledger_id):
                    self.log("under-replication mark removed", ledger_id=ledger_id,
                             reason=reason)
