"""The nemesis's ``tamper`` fault (issue 43): someone who can write a bookie's disk changes an
entry of a verifiable ledger and recomputes its CRC32C digest to match.

The fault writes a closed verifiable ledger of its own (``ENTRIES`` entries, E = Qw = Qa = 2,
so each entry has two copies; on the scheduled bookie when one of a few tries puts it in the
ensemble), stops one bookie of its ensemble (SIGTERM: its entry logs hold
the entries), rewrites one entry's payload wherever that bookie's directories hold its bytes
(its entry logs, the copy reads are served from; not the journal, whose group checksums a
change would break, which the bookie rightly refuses at start as a corrupt journal, exit status
3: a different fault) with a valid digest over the changed payload, and lets the
runner start the bookie again.  When the fault ends a thread waits for the bookie to serve
(up to ``CHECK_WAIT_S``) and checks, from a new client: every entry
reads back as written (a read never returns the changed bytes; ``TamperedEntryError`` counts as
a finding too, since the other copy is intact), and ``replica_check`` names that bookie and
entry (the root-mismatch check) when the bookie answers, unless the copy was healed away
meanwhile (the ledger no longer names that bookie for it: the auditor's entry check, or the heal
of a bookie lost for good).  Then it deletes its ledger, so the
workload's checks never see it.  A read that fails (the other copy's bookie down or lost for good
meanwhile: no bytes returned) is logged, not judged; wrong bytes or a wrong root check are
findings.
"""

from __future__ import annotations

import os
import random
import time

from bookie.testing.nemesis.client_proc import DIGEST, PASSWORD
from bookie.testing.nemesis.workload import CLIENT_CONFIG

ENTRIES = 12
CHECK_WAIT_S = 60.0  # the check waits this long for the tampered bookie to serve again


def _rewrite(dirs, old: bytes, new: bytes) -> int:
    """Replace every occurrence of ``old`` under ``dirs`` by ``new`` (same length)."""
    hits = 0
    for top in dirs:
        for root, _, files in os.walk(top):
            for name in files:
                path = os.path.join(root, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                at = data.find(old)
                while at >= 0:
                    fd = os.open(path, os.O_RDWR)
                    try:
                        os.pwrite(fd, new, at)
                    finally:
                        os.close(fd)
                    hits += 1
                    at = data.find(old, at + 1)
    return hits


class TamperFault:
    """Mixed into ``faults.Nemesis`` (uses ``bookies``, ``log``, ``findings``, ``_alive``,
    ``_cont_group``, ``_in_thread``, ``_Skip``)."""

    def _tamper(self, i: int):
        from bookie.client import BookKeeper  # lazy: asyncio
        from bookie.client.digest import DigestManager  # lazy: crc32c
        rng = random.Random(f"tamper:{i}:{len(self.findings)}")
        payloads = [b"tamper:%d:" % n + rng.randbytes(24) for n in range(ENTRIES)]
        self._alive(i)
        wanted = self.bookies.bookies[i]
        try:
            with BookKeeper(self.bookies.metadata_uri, dict(CLIENT_CONFIG)) as bk:
                for _ in range(8):  # an ensemble with the scheduled bookie, when one comes
                    lh = bk.create_ledger(2, 2, 2, digest=DIGEST, password=PASSWORD,
                                          verifiable=True)
                    if wanted in lh.metadata.last_ensemble:
                        break
                    lh.close()
                    bk.delete_ledger(lh.ledger_id)
                lh.add_range_async(payloads).result(30)
                lh.close()
                entry_id = rng.randrange(ENTRIES)
                ensemble = lh.metadata.ensemble_for(entry_id)
                bookie = wanted if wanted in ensemble else rng.choice(ensemble)
                copy = _stored_copy(bk, lh, entry_id)
        except Exception as exc:  # noqa: BLE001 - too few bookies up, the store down
            raise self._Skip(f"cannot write a verifiable ledger now ({exc})") from None
        if bookie not in self.bookies.bookies:
            raise self._Skip(f"bookie {bookie} is not one of the ensemble's")
        j = self.bookies.bookies.index(bookie)
        self._alive(j)
        self._cont_group(j)
        dm = DigestManager(lh.ledger_id, DIGEST, PASSWORD)
        old = dm.decode(copy)
        changed = bytes(b ^ 0x55 for b in old.data)
        forged = dm.encode(entry_id, old.lac, old.length, changed)
        ledger_id = lh.ledger_id

        def body() -> None:
            self.bookies.stop(j)
            # the entry logs only: a journal changed mid-file is a corrupt journal (exit 3)
            dirs = {d for d in self.bookies.overrides(j).get("ledgerDirectories", "").split(",")
                    if d}
            hits = _rewrite(sorted(dirs), copy, forged)
            self.log(f"nemesis: tamper: ledger {ledger_id} entry {entry_id} changed on bookie "
                     f"{j} {bookie} ({hits} places, CRC32C recomputed)")
        self._in_thread(j, f"tamper-{j}", body)

        def heal() -> None:  # the check waits for the bookie in a thread: the round goes on
            self._in_thread(None, f"tamper-check-{j}",
                            lambda: self._tamper_check(ledger_id, entry_id, j, bookie, payloads))
        return heal

    def _tamper_check(self, ledger_id: int, entry_id: int, j: int, bookie: str,
                      payloads) -> None:
        from bookie.client import BookKeeper, BookKeeperError  # lazy: asyncio
        deadline = time.monotonic() + CHECK_WAIT_S
        while not self._up(j) and time.monotonic() < deadline:
            time.sleep(0.5)
        try:
            with BookKeeper(self.bookies.metadata_uri, dict(CLIENT_CONFIG)) as bk:
                rh = bk.open_ledger(ledger_id, digest=DIGEST, password=PASSWORD)
                got = [e.data for e in rh.read_entries(0, len(payloads) - 1)]
                if got != payloads:
                    wrong = [n for n, (a, b) in enumerate(zip(got, payloads)) if a != b]
                    self.findings.append(f"tamper: ledger {ledger_id} read back other bytes "
                                         f"for entries {wrong}")
                if bookie not in rh.metadata.ensemble_for(entry_id):
                    self.log(f"nemesis: tamper: ledger {ledger_id} no longer names {bookie} "
                             f"for entry {entry_id}: healed around meanwhile (the auditor's entry check, "
                             f"or the heal of a lost bookie)")
                    bk.delete_ledger(ledger_id)
                    return
                bad = rh.replica_check(bookie)
                answered = all(why == "does not match the Merkle root"
                               for by in bad.values() for why in by.values())
                if answered and bad != {entry_id: {bookie: "does not match the Merkle root"}}:
                    self.findings.append(f"tamper: ledger {ledger_id}: the root check of "
                                         f"{bookie} found {bad}, not entry {entry_id}")
                bk.delete_ledger(ledger_id)
        except BookKeeperError as exc:  # the other copy's bookie down or lost meanwhile: no
            # bytes were returned, which is all a read may do then; nothing to judge
            self.log(f"nemesis: tamper: ledger {ledger_id} not checked: {type(exc).__name__}: "
                     f"{exc}")
        except Exception as exc:  # noqa: BLE001 - any other failure is a finding
            self.findings.append(f"tamper: ledger {ledger_id} entry {entry_id} on {bookie}: "
                                 f"{type(exc).__name__}: {exc}")


def _stored_copy(bk, lh, entry_id: int) -> bytes:
    """The formatted entry as the bookies store it (what the tamperer looks for on disk): the
    digest is deterministic, so the entry's own fields and payload make the same bytes."""
    from bookie.client.digest import DigestManager  # lazy: crc32c
    entry = bk.open_ledger(lh.ledger_id, digest=DIGEST, password=PASSWORD).read_entry(entry_id)
    dm = DigestManager(lh.ledger_id, DIGEST, PASSWORD)
    return dm.encode(entry_id, entry.lac, entry.length, entry.data)
