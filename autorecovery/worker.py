"""The autorecovery worker process: ``bookie[PORT] autorecovery`` beside a bookie's other
workers, or alone (``bookie autorecovery --conf F``).

Loop (every ``TICK_S``):

1. make sure this process stands in the auditor election (its vote goes with its session: a
   ZooKeeper session, or the embedded store's lease, so a SIGKILLed worker stops counting once
   the lease runs out and the next vote's holder is the auditor);
2. unless autorecovery is disabled (``/underreplication/disable``): if this process's vote is
   the lowest, run the auditor's tick; then take the first marked ledger whose replication lock
   is free, heal it (``Replicator.heal``) and release the lock.

The lock is an ephemeral node: a worker killed mid-ledger leaves it only until its session or
lease ends, then another worker takes the ledger and finishes it (copies are idempotent and
the metadata is written with compare-and-swap).
"""

from __future__ import annotations

import os
import random
import signal
import time

import orjson
import setproctitle

from bookie.storage import server_key
from bookie.autorecovery.auditor import Auditor
from bookie.autorecovery.replicator import HEALED, LOST, RETRY, WAIT, Replicator
from bookie.metadata import MetadataError, open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.workers.common import log_line
from bookie.client.config import PLACEMENT_POLICIES
from bookie.client.protocol.placement import Placement
from bookie.metadata.underreplication import MARKS
from bookie.workers import logs
from bookie.workers.metrics import Metrics


def curve_keys(conf) -> dict:
    """The client keys autorecovery speaks CURVE with: the bookie's own keypair
    (``curveSecretKeyFile``, else the key the bookie made: ``bookie.storage.server_key``),
    which other bookies enrol as admin; the bookies' keys come from their registrations, and
    ``curveServerKeys`` only pins those whose registration publishes none."""
    path = server_key.key_path(conf)
    # a standalone ``bookie autorecovery`` beside no bookie has no key file: an ephemeral key
    keys = {"curveSecretKeyFile": path} if os.path.exists(path) else {}
    if conf.curve_server_keys:
        keys["curveServerKeys"] = conf.curve_server_keys
    return keys

def placement_of(conf):
    """The replacement rule of ``ensemblePlacementPolicy`` (the client's own,
    ``client.protocol.placement``), or None for ``default`` (at random)."""
    policy = PLACEMENT_POLICIES[conf.ensemble_placement_policy]
    if policy == "default":
        return None
    return Placement(policy, {}, conf.min_num_racks_per_write_quorum,
                     conf.enforce_min_num_racks_per_write_quorum)


TICK_S = 0.5


class AutorecoveryWorker:
    def __init__(self, conf, name: str | None = None):
        self.conf = conf
        self.name = name or f"bookie[{conf.bookie_port}] autorecovery"
        self.worker_id = f"{conf.bookie_id}/{os.getpid()}"
        self.stopping = False
        self.store = None
        self.vote: str | None = None
        self.auditor: Auditor | None = None
        self.replicator: Replicator | None = None
        self._retry_after: dict[int, float] = {}
        self.counts = {"marked": 0, "lost": 0, "healed": 0}
        self._published: dict[str, float] = {}

    def log(self, event: str, level: str | None = None, **fields) -> None:
        log_line(self.name, event, level, **fields)

    def open(self) -> None:
        conf = self.conf
        self.store = open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                                   lease_ms=round(conf.registration_lease_s * 1000),
                                   zk_security=conf.zk_security)
        self.ur = UnderReplication(self.store)
        passwords = conf.autorecovery_passwords()  # the key and the 0600 file's lines
        self.replicator = Replicator(
            self.store, passwords, batch=conf.rereplication_entry_batch_size,
            rate_bytes_per_s=conf.replication_rate_bytes_per_s,
            grace_s=conf.open_ledger_rereplication_grace_s, log=self.log,
            timeout_s=conf.metadata_timeout_s, curve_keys=curve_keys(conf),
            placement=placement_of(conf))

    def close(self) -> None:
        if self.replicator is not None:
            self.replicator.close()
        if self.store is not None:
            try:
                if self.vote:
                    self.ur.withdraw(self.vote)
                self.store.close()
            except MetadataError:
                pass

    # -- the loop --------------------------------------------------------------------------------

    def _stand(self) -> bool:
        """Keep a vote in the election; True if it is the auditor's (the lowest)."""
        votes = self.ur.votes()
        if self.vote not in votes:
            self.vote = self.ur.volunteer(self.worker_id)
            votes = self.ur.votes()
        is_auditor = bool(votes) and votes[0] == self.vote
        if is_auditor and self.auditor is None:
            self.auditor = Auditor(self.store, self.conf.lost_bookie_recovery_delay_s,
                                   self.conf.auditor_bookie_check_interval_s, log=self.log,
                                   check_interval_s=self.conf.auditor_check_interval_s,
                                   fill=self.replicator.fill,
                                   unseen_grace_s=self.conf.metadata_timeout_s)
            self.log("elected auditor", vote=self.vote,
                     lost_bookie_recovery_delay_s=self.conf.lost_bookie_recovery_delay_s)
        elif not is_auditor and self.auditor is not None:
            # keep what it counted: the metrics are running totals of this process
            self.counts["marked"] += self.auditor.marked_total
            self.counts["lost"] += self.auditor.lost_reported_total
            self.auditor = None
            self.log("no longer auditor", vote=self.vote)
        return is_auditor

    def step(self) -> None:
        self._stand()
        try:
            if not self.ur.enabled():
                return
            if self.auditor is not None:
                self.auditor.tick()
            self._replicate_one()
        finally:
            self._publish()

    def _publish(self) -> None:
        """This worker's figures into the bookie's metrics (bookie.workers.metrics)."""
        if not hasattr(self, "metrics"):
            self.metrics = Metrics()
        auditor = self.auditor
        figures = {
            "bookie_autorecovery_marked_ledgers_total":
                self.counts["marked"] + (auditor.marked_total if auditor else 0),
            "bookie_autorecovery_lost_ledgers_total":
                self.counts["lost"] + self.replicator.lost_reported
                + (auditor.lost_reported_total if auditor else 0),
            "bookie_autorecovery_rereplicated_ledgers_total": self.counts["healed"],
            "bookie_autorecovery_rereplicated_entries_total": self.replicator.copied_entries,
            "bookie_autorecovery_rereplicated_bytes_total": self.replicator.copied_bytes,
        }
        for name, value in figures.items():
            delta = value - self._published.get(name, 0)
            if delta > 0:
                self.metrics.metric(name).inc(delta)
            self._published[name] = value
        self.metrics.metric("bookie_autorecovery_auditor").set(1 if auditor else 0)

    def _replicate_one(self) -> bool:
        now = time.monotonic()
        marks = list(self.ur.marks().items())
        random.shuffle(marks)  # workers spread over the marks
        for ledger_id, missing in marks:
            if self._retry_after.get(ledger_id, 0) > now:
                continue
            if not self.ur.try_lock(ledger_id, self.worker_id):
                continue
            try:
                found = self.ur.mark_of(ledger_id)
                if found is None:
                    continue
                mark_ctime_s = self._mark_ctime_s(ledger_id)
                outcome = self.replicator.heal(ledger_id, found[0], mark_ctime_s)
                if outcome in (RETRY, WAIT):
                    self._retry_after[ledger_id] = now + (5.0 if outcome == RETRY else 1.0)
                elif outcome == LOST:  # counted once, by whoever reported it first
                    self._retry_after.pop(ledger_id, None)
                elif outcome == HEALED:
                    self.counts["healed"] += 1
                return True
            finally:
                self.ur.unlock(ledger_id)
        return False

    def _mark_ctime_s(self, ledger_id: int) -> float | None:
        try:
            data, _ = self.store.get(f"{MARKS}/{ledger_id}")
            return orjson.loads(data).get("ctime_ms", 0) / 1000.0
        except Exception:  # noqa: BLE001 - a mark without a time: count from the ledger's
            return None

    def run(self, ready=None) -> int:
        self.open()
        self.log("autorecovery started", worker_id=self.worker_id,
                 metadata=self.conf.metadata_uri)
        if ready is not None:
            ready()
        try:
            while not self.stopping:
                try:
                    self.step()
                except MetadataError as e:
                    self.log("metadata store call failed; retrying", level="warning",
                             error=str(e))
                    time.sleep(1.0)
                except Exception as e:  # noqa: BLE001 - healing must never stop the bookie
                    # (the supervisor stops a bookie whose worker dies too often)
                    logs.emit_exception(self.name, "autorecovery round failed; retrying", e)
                    time.sleep(2.0)
                end = time.monotonic() + TICK_S
                while not self.stopping and time.monotonic() < end:
                    time.sleep(0.05)
        finally:
            self.close()
            self.log("autorecovery stopped")
        return 0


def main(conf, ready_fd: int | None = None, name: str | None = None) -> int:

    worker = AutorecoveryWorker(conf, name)
    setproctitle.setproctitle(worker.name)

    def stop(_signo, _frame):
        worker.stopping = True
    signal.signal(signal.SIGTERM, stop)
    if ready_fd is None:
        signal.signal(signal.SIGINT, stop)
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the supervisor

    def ready():
        if ready_fd is not None:
            os.write(ready_fd, b"R")
            os.close(ready_fd)
    return worker.run(ready)
