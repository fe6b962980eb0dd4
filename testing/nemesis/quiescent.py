"""Reads at a quiescent point: every copy of an entry straight from each bookie, what the
metadata says now, and whether healing has finished.  The rules are ``replicas.py``'s.

Nothing here goes through the replication client: ``RawBookieClient`` asks one bookie for one
entry (pipelined, ``WINDOW`` in flight), so that a copy the client would never read (the
second and third of a write set) is read too.
"""

from __future__ import annotations

import json
import time

from bookie import wire
from bookie.client.resolver import BookieResolver
from bookie.metadata import NoSuchLedgerError, open_metadata
from bookie.testing.nemesis.lifecycle import shell
from bookie.testing.nemesis.replicas import (CORRUPT, MISSING, UNREACHABLE, ReplicaReport,
                                             judge_ledger, write_set_ids)
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Op, Status

WINDOW = 64
READ_TIMEOUT_S = 10.0


def _read_from(raw, ledger_id: int, entry_ids: list[int], decode,
               timeout_s: float = READ_TIMEOUT_S) -> dict[int, object]:
    """Entry id -> the payload bookie ``raw`` holds (or MISSING / CORRUPT / UNREACHABLE /
    "status NAME")."""
    out: dict[int, object] = {}
    pending: dict[int, int] = {}
    todo = iter(entry_ids)
    exhausted = False
    while True:
        while not exhausted and len(pending) < WINDOW:
            entry_id = next(todo, None)
            if entry_id is None:
                exhausted = True
                break
            rid = next(raw._ids)
            raw.read_sock.send_multipart([wire.pack_header(Op.READ, 0, rid, ledger_id),
                                          wire.READ_BODY.pack(entry_id, 1)])
            pending[rid] = entry_id
        if not pending:
            return out
        if not raw.read_sock.poll(int(timeout_s * 1000)):
            for entry_id in pending.values():
                out[entry_id] = UNREACHABLE
            for entry_id in todo:
                out[entry_id] = UNREACHABLE
            return out
        frames = raw.read_sock.recv_multipart()
        _, status, rid, _ = wire.unpack_header(frames[0])
        entry_id = pending.pop(rid, None)
        if entry_id is None:
            continue
        if status == Status.OK:
            raws = wire.split_batch(frames[1], frames[2])
            try:
                entry = decode(raws[0])
                out[entry_id] = entry.data if entry.entry_id == entry_id else CORRUPT
            except Exception:  # noqa: BLE001 - a digest that fails, a short entry
                out[entry_id] = CORRUPT
        elif status in (Status.NO_ENTRY, Status.NO_LEDGER):
            out[entry_id] = MISSING
        else:
            try:
                out[entry_id] = f"status {Status(status).name}"
            except ValueError:
                out[entry_id] = f"status {status}"


class ReplicaReader:
    """Reads copies of entries from the bookies of a cluster; one raw client per bookie id."""

    def __init__(self, metadata_uri: str, password: bytes, read_timeout_s: float = READ_TIMEOUT_S):
        self.store = open_metadata(metadata_uri, timeout_s=20.0)
        self.password = password
        self.read_timeout_s = read_timeout_s
        self._raw: dict[str, object] = {}
        self._resolver = None  # named bookie ids (--lifecycle) resolve through the store

    def close(self) -> None:
        for raw in self._raw.values():
            raw.close()
        if self._resolver is not None:
            self._resolver.close()
        self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _client(self, bookie_id: str):
        if bookie_id not in self._raw:
            if self._resolver is None:
                self._resolver = BookieResolver(self.store)
            self._raw[bookie_id] = RawBookieClient(bookie_id, timeout_s=self.read_timeout_s,
                                                   resolver=self._resolver)
        return self._raw[bookie_id]

    def metadata(self, ledger_id: int):
        """The ledger's metadata now, or None if the store has no such ledger."""
        try:
            return self.store.read_ledger(ledger_id)[0]
        except NoSuchLedgerError:
            return None

    def check_ledger(self, ledger_id: int, expected: dict[int, bytes],
                     require_qw: bool) -> ReplicaReport:
        """Read every copy of the ``expected`` entries (entry id -> acknowledged payload) and
        judge them; a ledger the store no longer has is a violation (``vanished``)."""
        from bookie.client.digest import DigestManager  # lazy: crc32c
        meta = self.metadata(ledger_id)
        if meta is None:
            report = ReplicaReport()
            if expected:
                report.violations.append(("vanished", f"ledger {ledger_id}",
                                          f"the store has no such ledger; {len(expected)} "
                                          "acknowledged entries were never deleted"))
            return report
        decode = DigestManager(ledger_id, meta.digest_type, self.password).decode
        by_bookie: dict[str, list[int]] = {}
        for entry_id in expected:
            for bookie in write_set_ids(meta.fragments, entry_id, meta.ensemble_size,
                                        meta.write_quorum):
                by_bookie.setdefault(bookie, []).append(entry_id)
        copies: dict[int, dict[str, object]] = {}
        for bookie, entry_ids in by_bookie.items():
            try:
                got = _read_from(self._client(bookie), ledger_id, sorted(entry_ids), decode,
                                 self.read_timeout_s)
            except Exception:  # noqa: BLE001 - a socket that broke: no answer
                got = {e: UNREACHABLE for e in entry_ids}
            for entry_id, copy in got.items():
                copies.setdefault(entry_id, {})[bookie] = copy
        return judge_ledger(ledger_id, expected, copies, meta.ack_quorum, meta.write_quorum,
                            require_qw)

    def naming(self, bookie_ids: set[str]) -> list[int]:
        """Ledgers whose metadata still names one of ``bookie_ids``."""
        found = []
        for ledger_id in list(self.store.list_ledgers()):
            meta = self.metadata(ledger_id)
            if meta is not None and any(b in bookie_ids for _, ens in meta.fragments for b in ens):
                found.append(ledger_id)
        return found

    def wait_healed(self, bookie_ids: set[str], timeout_s: float) -> list[int]:
        """Wait until no ledger names a bookie of ``bookie_ids``; returns those that still do
        when ``timeout_s`` is over (empty: healed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = self.naming(bookie_ids) if bookie_ids else []
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(2.0)


ENTRY_CHECK_DONE = b"autorecovery: entry check done"  # the auditor's line (autorecovery/auditor.py)
ENTRY_CHECK_MAX_S = 600.0  # a 30-minute soak's ~1,000 ledgers took 80 s


def _entry_checks_done(log_paths) -> int:
    count = 0
    for path in log_paths:
        try:
            with open(path, "rb") as f:
                count += f.read().count(ENTRY_CHECK_DONE)
        except OSError:
            pass
    return count


def audit_and_wait(metadata_uri: str, timeout_s: float, log_paths=()) -> str | None:
    """Ask the auditor for a full check (every entry of every closed ledger on each bookie of
    its write set) and wait until the entry check it runs for it has finished (a new "entry
    check done" line in one of ``log_paths``, the bookies' logs: the check copies missing
    entries back itself, marking nothing, so no mark left is not enough: a soak's final check
    read three ledgers while the entry check was still restoring their third copies) and no
    ledger is marked under-replicated.  None when that happened, else why not (one line)."""
    done_before = _entry_checks_done(log_paths)
    status, out = shell(["triggeraudit", "--metadata", metadata_uri], timeout_s=60)
    if status != 0:
        return f"triggeraudit: exit {status}: {out}"
    time.sleep(3.0)  # the auditor's next round starts within its poll interval
    check_s = max(timeout_s, ENTRY_CHECK_MAX_S)  # it reads every copy of every closed ledger
    check_deadline = time.monotonic() + check_s
    while log_paths and _entry_checks_done(log_paths) <= done_before:
        if time.monotonic() >= check_deadline:
            return f"the auditor's entry check did not finish within {check_s:g} s"
        time.sleep(1.0)
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        cmd = ["listunderreplicated", "--json", "--metadata", metadata_uri]
        whole: list[str] = []
        status, out = shell(cmd, timeout_s=60, stdout=whole)
        if status == 0:
            try:
                marks = json.loads(whole[0])
            except ValueError:
                marks = None
            if marks is not None and not marks.get("underreplicated"):
                return None
            last = out
        time.sleep(3.0)
    return f"ledgers still marked under-replicated after {timeout_s:g} s: {last[:300]}"


def check_state(metadata_uri: str, password: bytes, targets: dict[int, dict[int, bytes]],
                deleted: set[int], lost_ids: set[str], require_qw: bool,
                heal_timeout_s: float = 120.0, maybe_deleted=None,
                read_timeout_s: float = READ_TIMEOUT_S) -> ReplicaReport:
    """One quiescent point: wait for healing around ``lost_ids`` (a ledger still naming one
    after ``heal_timeout_s`` is ``not_healed``), then read every copy of every entry in
    ``targets`` (ledger id -> entry id -> acknowledged payload), and check that no ledger of
    ``deleted`` is in the store again (``deleted_came_back``).  ``maybe_deleted``, a callable,
    gets ``exists(ledger_id)`` first (``Catalogue.settle_failed_deletes``)."""
    report = ReplicaReport()
    with ReplicaReader(metadata_uri, password, read_timeout_s) as reader:
        if maybe_deleted is not None:
            maybe_deleted(lambda ledger_id: reader.metadata(ledger_id) is not None)
            targets = {k: v for k, v in targets.items() if k not in deleted}
        left = reader.wait_healed(lost_ids, heal_timeout_s)
        if left:
            report.violations.append((
                "not_healed", f"ledgers {left[:12]}",
                f"{len(left)} ledgers still name a bookie lost for good or decommissioned "
                f"({', '.join(sorted(lost_ids))}) after {heal_timeout_s:g} s"))
        for ledger_id, expected in sorted(targets.items()):
            report.merge(reader.check_ledger(ledger_id, expected, require_qw))
        for ledger_id in sorted(deleted):
            if reader.metadata(ledger_id) is not None:
                report.violations.append(("deleted_came_back", f"ledger {ledger_id}",
                                          "deleted (the delete was acknowledged), and the "
                                          "store lists it again"))
    return report
