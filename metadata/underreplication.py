"""Autorecovery's records in the metadata store: under-replication marks, replication locks,
the auditor election, the enable flag, the audit trigger and lost-data reports.

Node tree (under the store's root; built only from the generic node calls of ``store.py``, so
ZooKeeper and the embedded store behave the same, and the contract suite runs on both)::

    /underreplication/ledgers/{ledger_id}     persistent; a ledger lost a copy.  JSON
                                              {"missing": [bookie_id, ...], "ctime_ms": t}
    /underreplication/locks/{ledger_id}       ephemeral; a replication worker is healing it.
                                              JSON {"holder": worker_id}.  Dies with the
                                              holder's session (ZooKeeper) or lease (embedded).
    /underreplication/auditorelection/vote_NNNNNNNNNN
                                              ephemeral, sequential; one per autorecovery
                                              worker.  The lowest sequence number is the
                                              auditor.  JSON {"id": worker_id}
    /underreplication/disable                 present: autorecovery is disabled cluster-wide
                                              (auditor and workers idle; marks are kept)
    /underreplication/triggeraudit            its version grows by one per ``triggeraudit``
    /underreplication/lostBookieRecoveryDelay the cluster's lostBookieRecoveryDelay in seconds
                                              (``bookie shell lostbookierecoverydelay -set N``),
                                              over each auditor's configured one; absent: theirs
    /underreplication/lost/{ledger_id}        persistent; the auditor found entries with no
                                              live copy.  Written once, so a ledger is reported
                                              once however often the auditor changes.

A mark is a request, never a fact: the auditor removes it when the bookie came back or the
ledger was deleted, and a replication worker removes it when nothing of the ledger names a
missing bookie any more.
"""

from __future__ import annotations

import time

import orjson

from bookie.metadata.errors import BadVersionError, NodeExistsError, NoSuchNodeError
from bookie.metadata.store import (
    UNDERREPLICATION, UNDERREPLICATION_LOST, UNDERREPLICATION_MARKS, MetadataStore, join)

MARKS = UNDERREPLICATION_MARKS
LOCKS = UNDERREPLICATION + "/locks"
ELECTION = UNDERREPLICATION + "/auditorelection"
DISABLE = UNDERREPLICATION + "/disable"
TRIGGER = UNDERREPLICATION + "/triggeraudit"
DELAY = UNDERREPLICATION + "/lostBookieRecoveryDelay"
LOST = UNDERREPLICATION_LOST  # MARKS and LOST are data (see store.py); the others coordinate


def _load(data: bytes) -> dict:
    try:
        doc = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


class UnderReplication:
    """Autorecovery's view of one store.  Thread-safe as the store is; every call returns or
    raises (``MetadataError``) within the store's timeout."""

    def __init__(self, store: MetadataStore):
        self.store = store

    def _docs(self, parent: str) -> dict[int, dict]:
        """Ledger id -> JSON document of every child of ``parent`` (children that vanish while
        being read are skipped; a missing parent is empty)."""
        try:
            names = self.store.children(parent)
        except NoSuchNodeError:
            return {}
        out = {}
        for name in names:
            try:
                out[int(name)] = _load(self.store.get(join(parent, name))[0])
            except NoSuchNodeError:
                continue
        return out

    # -- marks -------------------------------------------------------------------------------

    def mark(self, ledger_id: int, missing: list[str]) -> bool:
        """Mark ``ledger_id`` under-replicated, missing copies on ``missing`` (merged with an
        existing mark).  Returns True if the mark is new or grew."""
        path = join(MARKS, str(int(ledger_id)))
        want = sorted(set(missing))
        while True:
            try:
                data, version = self.store.get(path)
            except NoSuchNodeError:
                try:
                    self.store.create(path, orjson.dumps(
                        {"missing": want, "ctime_ms": int(time.time() * 1000)}))
                    return True
                except NodeExistsError:
                    continue
            doc = _load(data)
            have = set(doc.get("missing") or [])
            if have >= set(want):
                return False
            doc["missing"] = sorted(have | set(want))
            try:
                self.store.set(path, orjson.dumps(doc), version)
                return True
            except (BadVersionError, NoSuchNodeError):
                continue

    def marks(self) -> dict[int, list[str]]:
        """Every marked ledger -> the bookies it misses copies on."""
        return {ledger_id: sorted(doc.get("missing") or [])
                for ledger_id, doc in self._docs(MARKS).items()}

    def mark_of(self, ledger_id: int) -> tuple[list[str], int] | None:
        """``(missing, version)`` of a ledger's mark, or None."""
        try:
            data, version = self.store.get(join(MARKS, str(int(ledger_id))))
        except NoSuchNodeError:
            return None
        return sorted(_load(data).get("missing") or []), version

    def unmark(self, ledger_id: int, version: int | None = None) -> bool:
        """Remove the mark (at ``version`` if given); False if it was not there or changed."""
        try:
            self.store.delete(join(MARKS, str(int(ledger_id))), version)
            return True
        except (NoSuchNodeError, BadVersionError):
            return False

    # -- replication locks -------------------------------------------------------------------

    def try_lock(self, ledger_id: int, holder: str) -> bool:
        """Take the replication lock of a ledger for this store's session; False if a live
        session holds it.  The lock ends with ``unlock`` or with this session."""
        try:
            self.store.create(join(LOCKS, str(int(ledger_id))),
                              orjson.dumps({"holder": holder}), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def unlock(self, ledger_id: int) -> None:
        try:
            self.store.delete(join(LOCKS, str(int(ledger_id))))
        except NoSuchNodeError:
            pass

    def lock_holder(self, ledger_id: int) -> str | None:
        try:
            data, _ = self.store.get(join(LOCKS, str(int(ledger_id))))
        except NoSuchNodeError:
            return None
        return _load(data).get("holder")

    # -- the auditor election ----------------------------------------------------------------

    def volunteer(self, worker_id: str) -> str:
        """Stand for auditor: an ephemeral, sequential vote for this session; returns its name.
        The vote goes with the session (or ``withdraw``)."""
        path = self.store.create(join(ELECTION, "vote_"), orjson.dumps({"id": worker_id}),
                                 ephemeral=True, sequential=True)
        return path.rsplit("/", 1)[1]

    def withdraw(self, vote: str) -> None:
        try:
            self.store.delete(join(ELECTION, vote))
        except NoSuchNodeError:
            pass

    def votes(self) -> list[str]:
        """Live votes, lowest sequence first (the first is the auditor's)."""
        try:
            names = self.store.children(ELECTION)
        except NoSuchNodeError:
            return []
        return sorted(names, key=lambda n: n.rsplit("_", 1)[-1])

    def auditor(self) -> tuple[str, str] | None:
        """``(vote, worker_id)`` of the auditor, or None when no worker stands."""
        for vote in self.votes():
            try:
                data, _ = self.store.get(join(ELECTION, vote))
            except NoSuchNodeError:
                continue
            return vote, str(_load(data).get("id", "?"))
        return None

    # -- enable flag, audit trigger ----------------------------------------------------------

    def enabled(self) -> bool:
        return self.store.exists(DISABLE) is None

    def set_enabled(self, flag: bool) -> None:
        """Enable or disable autorecovery cluster-wide (idempotent)."""
        if flag:
            try:
                self.store.delete(DISABLE)
            except NoSuchNodeError:
                pass
        else:
            try:
                self.store.create(DISABLE)
            except NodeExistsError:
                pass

    def trigger_audit(self) -> int:
        """Ask the auditor for a full check now; returns the trigger's new version."""
        while True:
            version = self.store.exists(TRIGGER)
            if version is None:
                try:
                    self.store.create(TRIGGER)
                    return 0
                except NodeExistsError:
                    continue
            try:
                return self.store.set(TRIGGER, b"", version)
            except (BadVersionError, NoSuchNodeError):
                continue

    def audit_trigger(self) -> int:
        """The trigger's version (-1 before the first trigger)."""
        version = self.store.exists(TRIGGER)
        return -1 if version is None else version

    def recovery_delay_s(self) -> int | None:
        """The cluster-wide lostBookieRecoveryDelay (seconds) set in the store, or None."""
        try:
            data, _ = self.store.get(DELAY)
        except NoSuchNodeError:
            return None
        try:
            return int(data.decode())
        except ValueError:
            return None

    def set_recovery_delay_s(self, delay_s: int) -> None:
        """Set the cluster-wide lostBookieRecoveryDelay; every auditor uses it from its next
        look at membership."""
        data = str(int(delay_s)).encode()
        while True:
            try:
                self.store.set(DELAY, data, None)
                return
            except NoSuchNodeError:
                try:
                    self.store.create(DELAY, data)
                    return
                except NodeExistsError:
                    continue

    # -- lost data ---------------------------------------------------------------------------

    def report_lost(self, ledger_id: int, detail: dict) -> bool:
        """Record that a ledger lost entries; True the first time, False if already reported."""
        try:
            self.store.create(join(LOST, str(int(ledger_id))), orjson.dumps(detail))
            return True
        except NodeExistsError:
            return False

    def lost(self) -> dict[int, dict]:
        return self._docs(LOST)

    def forget_lost(self, ledger_id: int) -> None:
        try:
            self.store.delete(join(LOST, str(int(ledger_id))))
        except NoSuchNodeError:
            pass
