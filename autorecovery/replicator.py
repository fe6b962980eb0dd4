"""Healing one marked ledger: the replication worker's I/O around ``rules.plan_ledger``.

``Replicator.heal(ledger_id)`` runs under the ledger's replication lock (taken by the caller)
and ends in one of the outcomes below; only RETRY and WAIT leave the mark for later:

* HEALED   - no fragment names a missing bookie any more; the mark is removed.
* SETTLED  - the mark was stale (ledger deleted, bookies back, nothing names them); removed.
             A ledger deleted while it is being healed settles too: nothing is left to heal,
             and an entry its bookies dropped since is not a loss (never reported lost).
* LOST     - some entries have no live copy; reported once (``/underreplication/lost``), the
             positions whose every entry has a live copy healed, the mark removed: it is never
             retried.  A position holding an entry with no live copy keeps naming its bookie
             (repointed, those entries would be cut off from it for good if it comes back)
             unless that bookie is gone for good (``core.naming``: its cookie left the store,
             or an operator's ``recover`` / ``decommissionbookie`` forced it): then what has a
             live copy is copied and the position repointed.
* WAIT     - an open ledger whose last fragment names a missing bookie, inside
             ``openLedgerRereplicationGracePeriod``; its writer may still replace the bookie
             itself.  Only such a ledger is fenced and recovered once the grace is over
             (``rules.needs_fence``); a missing bookie in earlier fragments of an open ledger is
             copied around with the ledger open, its writer left alone.
* RETRY    - a bookie did not answer, no replacement is writable, recovery failed, or no
             key can carry a copy (no recovery secret, password unknown: ``NoKey``, said
             once per ledger): nothing copied is nothing repointed (issue 39).

Keys: copies and the recovery of an open ledger prove their right with the ledger's cluster
recovery credential (bookie.metadata.recovery_secret), so a ledger heals whatever its password.
A password from ``autoRecoveryLedgerPasswords`` (or the empty one) that matches the metadata's
digest is the fallback for a bookie that refuses the credential (one that predates the flag),
and the digest key of an open ``mac`` ledger's recovery reads: an open ``mac`` ledger whose
password autorecovery does not know is reported, not healed.

Order for each (fragment, lost position): copy the entries to the replacement first, then
write the metadata with compare-and-swap.  A worker killed between the two leaves copies that
nothing names (the replacement's GC drops them after ``gcOverreplicatedLedgerWaitTime`` if
another worker picks another bookie) and the
mark in place, so another worker finishes the job once the lock has expired with the session.
"""

from __future__ import annotations

import random
import time

from bookie.autorecovery import cookies, rules, verified
from bookie.autorecovery.copier import (Bookies, CopyError, EntryMissing, Key, NoKey, RateLimiter,
                                        Refused, copy_residue)
from bookie.client.auth import client_curve
from bookie.client.config import ClientConfig
from bookie.client.digest import master_key
from bookie.client.resolver import BookieResolver
from bookie.metadata import BadVersionError, NoSuchLedgerError
from bookie.metadata.ledger import LedgerState, password_matches
from bookie.metadata.recovery_secret import credential, recovery_secret
from bookie.metadata.underreplication import UnderReplication
from bookie.wire import Flag
from bookie.client.errors import BookKeeperError
from bookie.client.metadata import ClientStore

HEALED, SETTLED, LOST, WAIT, RETRY = "healed", "settled", "lost", "wait", "retry"


class Replicator:
    """Heals ledgers of one store.  Not thread-safe: one per worker thread.

    Args:
        store: an open ``MetadataStore``.
        passwords: ledger passwords to try (the empty one is always tried): the fallback to
            the recovery credential (module docstring).
        batch: entries per read and add (``rereplicationEntryBatchSize``).
        rate_bytes_per_s: copy rate limit (<= 0: unlimited).
        grace_s: ``openLedgerRereplicationGracePeriod``.
        log: ``log(event, **fields)``.
        dry_run: plan and report, copy and write nothing.
        placement: ``client.protocol.placement.Placement`` of ``ensemblePlacementPolicy`` (None:
            a replacement at random among the writable bookies outside the fragment).
    """

    def __init__(self, store, passwords=(), batch: int = 10, rate_bytes_per_s: float = -1,
                 grace_s: float = 30.0, log=None, timeout_s: float = 10.0,
                 dry_run: bool = False, rng: random.Random | None = None, progress=None,
                 curve_keys: dict | None = None, placement=None):
        self.store = store
        self.ur = UnderReplication(store)
        self.passwords = [b""] + [p for p in passwords if p]
        self.batch = batch
        self.limiter = RateLimiter(rate_bytes_per_s)
        self.grace_s = grace_s
        self.log = log or (lambda event, **fields: None)
        # CURVE: {"curveSecretKeyFile", "curveServerKeys"} of a key enrolled as admin
        self.curve_keys = dict(curve_keys or {})
        self.bookies = Bookies(timeout_s, client_curve(ClientConfig.build(self.curve_keys)),
                               BookieResolver(store))  # named ids: where they are now
        self.timeout_s = timeout_s
        self.dry_run = dry_run
        self.rng = rng or random.Random()
        self.progress = progress
        self.exclude: set[str] = set()  # never a replacement (bookies being recovered)
        # the client's placement rule (client.protocol.placement.Placement) or None: at random
        self.placement = placement
        self.copied_bytes = 0
        self.copied_entries = 0
        self.lost_reported = 0  # ledgers this replicator was the first to report lost
        self._secret: bytes | None = None
        self._no_key: set[int] = set()  # ledgers already said to have no key to copy with

    def close(self) -> None:
        self.bookies.close()

    # -- helpers ---------------------------------------------------------------------------------

    def _password(self, meta) -> bytes | None:
        if not meta.password_digest:
            return b""
        for p in self.passwords:
            if password_matches(meta.password_digest, p, master_key(p)):  # any record's form
                return p
        return None

    def _keys(self, ledger_id: int, password: bytes | None) -> list[Key]:
        """The keys a recovery add may carry, best first (module docstring)."""
        if self._secret is None:
            self._secret = recovery_secret(self.store, create=not self.dry_run)
        keys = [Key(credential(self._secret, ledger_id), int(Flag.RECOVERY_CREDENTIAL))] \
            if self._secret else []
        return keys + ([Key(master_key(password))] if password is not None else [])

    def _recover(self, ledger_id: int, meta, password: bytes | None, lost=(),
                 avoid=()) -> bool:
        """Fence and close an open ledger through the client (its recovery): on the recovery
        credential, then (a bookie refused it) on the password if it is known.  ``lost``: the
        bookies being healed around, which the recovery replaces without waiting for them;
        ``avoid``: those of them that still run (a decommissioned bookie, read-only), which
        it reads from but never re-adds to (it would refuse them READ_ONLY)."""
        from bookie.client import BookKeeper  # lazy: asyncio
        try:
            with BookKeeper(self.store, passwd=password or b"", digestType=meta.digest_type,
                            **self.curve_keys) as bk:
                error: Exception = RuntimeError("no recovery secret and no known password")
                for key in self._keys(ledger_id, password):
                    try:
                        if key.flags:
                            bk.recover_with_credential(ledger_id, key.key, password or b"",
                                                       lost=lost, avoid=avoid)
                        else:
                            bk.open_ledger(ledger_id, digest=meta.digest_type, password=password).close()
                        return True
                    except Exception as e:  # noqa: BLE001 - the next key, or try again later
                        error = e
                raise error
        except Exception as e:  # noqa: BLE001 - any failure: try again later
            self.log("could not recover open ledger", level="warning", ledger_id=ledger_id,
                     error=str(e))
            return False

    def _copy(self, ledger_id: int, keys: list[Key], copies, stride: int, target: str,
              batch: int, missing: list | None = None) -> None:
        """Copy ``copies`` to ``target`` with the first key it takes (raises as copy_residue;
        ``missing`` as copy_residue's).  Raises ``NoKey`` when there is something to copy and
        ``keys`` is empty: a copy never made must never pass for one that was (issue 39); a
        position that holds no entry needs no key."""
        if not keys and copies:
            raise NoKey(ledger_id)
        for n, key in enumerate(keys):
            try:
                for copy in copies:
                    self.copied_bytes += copy_residue(self.bookies, ledger_id, key, copy, stride,
                                                      target, batch, self.limiter, self._progress,
                                                      missing)
                return
            except Refused:
                if n == len(keys) - 1:
                    raise

    def _progress(self, n_entries: int, n_bytes: int) -> None:
        self.copied_entries += n_entries
        if self.progress is not None:
            self.progress(n_entries, n_bytes)

    # -- one ledger ------------------------------------------------------------------------------

    def heal(self, ledger_id: int, missing: list[str] | None = None, mark_ctime_s: float | None = None,
             force: bool = False, skip_open: bool = False, read_from_missing: bool = False
             ) -> str:
        """Heal ``ledger_id`` (module docstring).  ``missing``: the bookies its mark names (None:
        read the mark; every unregistered bookie it names when there is none).  ``force``
        (manual recover, decommission): replace ``missing`` even while registered, reading from
        them too with ``read_from_missing`` (a decommissioned bookie that still runs).
        ``skip_open``: leave a ledger that is not closed."""
        found = self.ur.mark_of(ledger_id)
        # the mark is removed at the version read here only: bookies the auditor adds to it
        # meanwhile keep it for the next round
        mark_version = found[1] if found else None
        if missing is None:
            missing = found[0] if found else None
        try:
            meta, version = self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            self._settle(ledger_id, "deleted", mark_version)
            return SETTLED
        registered = self.store.registered_bookies()
        if missing is None:
            missing = sorted(rules.named_bookies(meta) - registered)
        reason = rules.settle_mark(missing, meta, set() if force else registered)
        if reason != rules.KEEP:
            self._settle(ledger_id, reason, mark_version)
            return SETTLED
        dead = (set(missing) & rules.named_bookies(meta)) - (set() if force else registered)
        unavailable = dead - registered if read_from_missing else set(dead)
        password = self._password(meta)
        if meta.state is not LedgerState.CLOSED and skip_open:
            return WAIT
        if rules.needs_fence(meta, dead) and password is None and meta.digest_type == "mac":
            # its recovery must check the entries' MACs, keyed by the password (module doc)
            self._report_lost(ledger_id, {"reason": "open mac ledger; password unknown to "
                                          "autorecovery", "missing": sorted(dead)})
            if not self.dry_run:
                self.ur.unmark(ledger_id, mark_version)
            return LOST
        if rules.needs_fence(meta, dead):  # earlier fragments of an open ledger: no fence
            since = mark_ctime_s if mark_ctime_s is not None else meta.ctime_ms / 1000.0
            if not force and time.time() - since < self.grace_s:
                return WAIT
            if self.dry_run:
                return RETRY
            if not self._recover(ledger_id, meta, password, lost=unavailable,
                                 avoid=dead - unavailable):
                if not self.store.ledger_exists(ledger_id):  # deleted under us: nothing left to heal
                    self._settle(ledger_id, "deleted", mark_version)
                    return SETTLED
                return RETRY
            try:
                meta, version = self.store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                self._settle(ledger_id, "deleted", mark_version)
                return SETTLED
            if rules.needs_fence(meta, dead):
                return RETRY
            dead = (set(missing) & rules.named_bookies(meta)) - (set() if force else registered)
        try:
            outcome = self._heal_plan(ledger_id, meta, dead, unavailable, password, force)
        except NoSuchLedgerError:  # deleted under us (by its owner, or an operator)
            self._settle(ledger_id, "deleted", mark_version)
            return SETTLED
        if outcome == RETRY:
            return RETRY
        if not self.dry_run:
            self.ur.unmark(ledger_id, mark_version)
        if outcome == HEALED:
            self.log("ledger re-replicated", ledger_id=ledger_id, missing=",".join(sorted(dead)))
        return outcome

    def _heal_plan(self, ledger_id: int, meta, dead: set[str], unavailable: set[str],
                   password: bytes | None, force: bool) -> str:
        """Copy and repoint every (fragment, dead position) of ``meta``: HEALED, LOST or RETRY.
        Raises ``NoSuchLedgerError`` when the ledger is deleted meanwhile: nothing is left to
        heal, and a copy that found no entry there is no loss."""
        keys = self._keys(ledger_id, password)
        outcome = HEALED
        plan = rules.plan_ledger(meta, dead, self.rng, unavailable)
        # every dead bookie's, not only those of positions planned unhealable: a write set may
        # name a bookie that never held its entries (it replaced one whose copies had no
        # source), so a position found partly lost only while copying is judged the same way
        gone = self.gone_for_good({h.bookie for h in plan}, force)
        for heal in plan:
            if heal.unhealable:
                # Entries here have no live copy.  Repointed, they would be cut off from their
                # bookie for good, and a bookie that was only down (the nemesis found this:
                # supervisors killed while lostBookieRecoveryDelay was 0) serves them again when
                # it is back: the position keeps naming it unless it is gone for good
                # (core.naming.may_unname).  Reported once either way.
                self._report_lost(ledger_id, {"reason": "no live copy", "first": heal.first,
                                              "last": heal.last, "bookie": heal.bookie,
                                              "gone_for_good": heal.bookie in gone})
                outcome = LOST
                if not rules.may_repoint(heal, gone):
                    continue
            result = self._heal_fragment(ledger_id, heal, keys, heal.bookie in gone)
            if result == LOST:
                outcome = LOST
            elif result == RETRY:
                if not self.store.ledger_exists(ledger_id):  # its bookies refuse copies of a deleted ledger
                    raise NoSuchLedgerError(ledger_id)
                return RETRY
        return outcome

    def _heal_fragment(self, ledger_id: int, heal: rules.FragmentHeal, keys: list[Key],
                       gone: bool = False) -> str:
        """Copy one position's entries to a replacement and repoint it: HEALED, LOST or RETRY.
        ``gone``: its bookie is gone for good, so entries no live member holds are lost
        whatever is done: they are reported, the others copied, and the position repointed
        (``core.naming.may_unname``); otherwise the first such entry stops the heal (the
        bookie may come back with it)."""
        meta, version = self.store.read_ledger(ledger_id)
        ensemble = dict(meta.fragments).get(heal.first)
        if ensemble is None or ensemble[heal.position] != heal.bookie:
            return HEALED  # changed meanwhile: nothing left to do here
        writable = self.store.list_bookies()
        self._refresh_locations(writable)
        avoid: set[str] = set(self.exclude)
        while True:
            target = rules.choose_replacement(ensemble, writable, self.rng, avoid, heal.position,
                                              meta.write_quorum, self.placement)
            if target is None:
                self.log("no writable bookie can take the fragment", level="warning",
                         ledger_id=ledger_id, first=heal.first, bookie=heal.bookie)
                return RETRY
            if self.dry_run:
                self.log("would copy fragment", ledger_id=ledger_id, first=heal.first,
                         last=heal.last, bookie=heal.bookie, target=target,
                         entries=sum(c.count for c in heal.copies))
                return HEALED
            missing: list | None = [] if gone else None
            try:
                self._copy(ledger_id, keys, heal.copies, meta.ensemble_size, target, self.batch,
                           missing)
                break
            except NoKey as e:  # no copy can be made: the position keeps naming its bookie
                self._say_no_key(e)
                return RETRY
            except EntryMissing as e:
                if not self.store.ledger_exists(ledger_id):  # deleted: its bookies dropped the entries
                    raise NoSuchLedgerError(ledger_id) from None
                self._report_lost(ledger_id, {"reason": "no live copy", "entry_id": e.entry_id,
                                              "bookie": heal.bookie})
                return LOST
            except CopyError as e:
                self.log("copy failed; trying another bookie", level="warning",
                         ledger_id=ledger_id, target=target, error=str(e))
                avoid.add(target)
        outcome = HEALED
        if missing:
            self._report_lost(ledger_id, {"reason": "no live copy", "first": heal.first,
                                          "last": heal.last, "bookie": heal.bookie,
                                          "entries": missing[:20], "gone_for_good": True})
            outcome = LOST
        while True:
            try:
                new = rules.replace_bookie(meta, heal.first, heal.position, heal.bookie, target)
            except ValueError:
                return outcome  # someone else repointed it
            try:
                self.store.write_ledger(ledger_id, new, version)
                return outcome
            except BadVersionError:
                meta, version = self.store.read_ledger(ledger_id)

    def copy_position(self, ledger_id: int, first: int, position: int, target: str) -> int:
        """Copy the entries one position of a closed ledger's fragment holds to ``target`` and
        repoint nothing: a heal whose repoint never happened (the nemesis's ``overreplicated``
        fault; the target's GC later drops the copies).  Sources: every member of each write
        set.  Returns the entries copied (0: nothing to copy).  Raises as ``copy_residue``."""
        meta, _ = self.store.read_ledger(ledger_id)
        bookie = dict(meta.fragments)[first][position]
        heals = [h for h in rules.plan_ledger(meta, {bookie}, self.rng, set())
                 if h.first == first and h.position == position]
        if not heals or not heals[0].copies:
            return 0
        before = self.copied_entries
        self._copy(ledger_id, self._keys(ledger_id, self._password(meta)), heals[0].copies,
                   meta.ensemble_size, target, self.batch)
        return self.copied_entries - before

    def _refresh_locations(self, writable) -> None:
        """The writable bookies' racks into the placement (as the client reads them)."""
        if self.placement is None:
            return
        try:
            self.placement.locations = ClientStore(self.store, own=False).locations(writable)
        except BookKeeperError as e:  # keep the last ones known; the next heal reads again
            self.log("could not read bookie locations", level="warning", error=str(e))

    def gone_for_good(self, bookies, force: bool = False) -> set[str]:
        """Those of ``bookies`` whose data is gone for good (``autorecovery.cookies``):
        ``force`` (an operator's recover or decommission), or no cookie in the store; never a
        renamed one."""
        return cookies.gone_for_good(self.store, bookies, force, log=self.log)

    # -- the periodic entry check ----------------------------------------------------------------

    def fill(self, ledger_id: int) -> int:
        """Give every entry of a closed ledger a copy on each bookie of its write set: read
        what each registered bookie holds (strided, in batches) and copy each missing entry to
        it from another member.  Returns the entries copied; 0 for an open or unknown ledger."""
        try:
            meta, _ = self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            return 0
        registered = self.store.registered_bookies()
        if meta.state is not LedgerState.CLOSED:
            return 0
        keys, stride, filled = self._keys(ledger_id, self._password(meta)), meta.ensemble_size, 0
        if not keys:  # nothing could be copied: say so, never "restored" (issue 39)
            self._say_no_key(NoKey(ledger_id))
            return 0
        unregistered = rules.named_bookies(meta) - registered
        for run in rules.holdings(meta, skip=unregistered):
            entry, left = run.first_entry, run.count
            while left > 0:
                want = min(self.batch, left)
                try:
                    got = len(self.bookies.read_strided(run.bookie, ledger_id, entry, want, stride))
                except CopyError:
                    break  # not answering now: the next check looks again
                entry, left = entry + got * stride, left - got
                if got == want or left <= 0:
                    continue
                if got:  # short: a gap, or only the answer's size limit?  Ask for it alone
                    try:
                        if self.bookies.read_strided(run.bookie, ledger_id, entry, 1, stride):
                            continue
                    except CopyError:
                        break
                # ``entry`` is missing on run.bookie: copy it from another member
                one = rules.Copy(entry % stride, entry, 1, run.sources)
                try:
                    self._copy(ledger_id, keys, [one], stride, run.bookie, 1)
                    filled += 1
                    self.log("entry copy restored", ledger_id=ledger_id, entry_id=entry,
                             bookie=run.bookie)
                except EntryMissing:
                    self._report_lost(ledger_id, {"reason": "no live copy", "entry_id": entry})
                except CopyError:
                    break
                entry, left = entry + stride, left - 1
        if meta.verifiable:  # a copy that does not match its Merkle root: a lost copy (issue 43)
            filled += verified.heal_mismatches(self, ledger_id, meta)
        return filled

    def _say_no_key(self, error: NoKey) -> None:
        """Warn once per ledger that it cannot be copied (it is retried, and checked, again)."""
        if error.ledger_id not in self._no_key:
            self._no_key.add(error.ledger_id)
            self.log("cannot copy ledger: no key", level="warning", ledger_id=error.ledger_id,
                     error=str(error))

    def _settle(self, ledger_id: int, reason: str, mark_version: int | None) -> None:
        if not self.dry_run:
            self.ur.unmark(ledger_id, mark_version)
        self.log("under-replication mark removed", ledger_id=ledger_id, reason=reason)

    def _report_lost(self, ledger_id: int, detail: dict) -> None:
        if not self.store.ledger_exists(ledger_id):
            return  # deleted meanwhile: nothing of it is lost, nothing to report
        if self.dry_run:
            self.log("would report lost entries", level="error", ledger_id=ledger_id, **detail)
            return
        if self.ur.report_lost(ledger_id, detail):
            self.lost_reported += 1
            self.log("ledger lost entries: no live copy to heal from", level="error",
                     ledger_id=ledger_id, **detail)
