"""The client's metrics on prometheus_client, when the client key ``enableClientMetrics`` is on.

Names (BookKeeper's client stats, under ``bookkeeper_client_``; no labels):

| name | type | counts |
| --- | --- | --- |
| ``bookkeeper_client_add_entry_latency_seconds`` | histogram | each confirmed entry, from the call that handed it over to its acknowledgement (Qa bookies and every earlier entry) |
| ``bookkeeper_client_add_entry_total`` | counter | entries confirmed |
| ``bookkeeper_client_read_entry_total`` | counter | entries read (``read_entries``, unconfirmed reads, log reads) |
| ``bookkeeper_client_ensemble_changes_total`` | counter | ensemble changes written (a failed bookie replaced in a ledger's metadata) |
| ``bookkeeper_client_speculative_reads_total`` | counter | entries asked of their next replica because the first left them unanswered for ``speculativeReadTimeout`` |
| ``bookkeeper_client_verify_failures_total`` | counter | copies of a verifiable ledger's entries that did not match its Merkle root (a tampered or corrupt replica; the read went elsewhere) |

Theory of operation: the families are created once per process, in prometheus_client's
default registry (or the one ``families`` is first given), the first time a client with
metrics on is opened; every such client of the process counts into the same families, so
several clients add up and never collide (prometheus_client refuses a family registered twice).
Each family exists from the scrape after that first client opened, at zero until it counts.
A process exposes them as any prometheus_client program does (``start_http_server``,
``generate_latest``).  Clients with metrics off touch none of this.

Cost: one histogram observation and counter increment per confirmed range of entries and per
entry of it (a microsecond or two each), on the client's I/O thread.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future
from bookie.client.protocol.reader import ReadOp
from bookie.client.protocol import actions as A

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
NAMES = ("bookkeeper_client_add_entry_latency_seconds", "bookkeeper_client_add_entry_total",
         "bookkeeper_client_read_entry_total", "bookkeeper_client_ensemble_changes_total",
         "bookkeeper_client_speculative_reads_total", "bookkeeper_client_verify_failures_total")

_lock = threading.Lock()
_families: dict[int, "Families"] = {}  # id(registry) -> its families


@dataclasses.dataclass(frozen=True)
class Families:
    add_latency: object
    adds: object
    reads: object
    ensemble_changes: object
    speculative_reads: object
    verify_failures: object


def families(registry=None) -> Families:
    """The process's client metric families in ``registry`` (default: prometheus_client's
    ``REGISTRY``), created on the first call, the same object on every later one."""
    from prometheus_client import REGISTRY, Counter, Histogram  # lazy: prometheus_client
    registry = REGISTRY if registry is None else registry
    with _lock:
        found = _families.get(id(registry))
        if found is None:
            found = _families[id(registry)] = Families(
                Histogram("bookkeeper_client_add_entry_latency_seconds",
                          "Latency of a confirmed add, per entry: handed over to acknowledged.",
                          buckets=LATENCY_BUCKETS_S, registry=registry),
                Counter("bookkeeper_client_add_entry", "Entries confirmed to this process's "
                        "clients.", registry=registry),
                Counter("bookkeeper_client_read_entry", "Entries read by this process's "
                        "clients.", registry=registry),
                Counter("bookkeeper_client_ensemble_changes", "Ensemble changes written by "
                        "this process's clients.", registry=registry),
                Counter("bookkeeper_client_speculative_reads", "Entries asked of their next "
                        "replica after speculativeReadTimeout without an answer.",
                        registry=registry),
                Counter("bookkeeper_client_verify_failures", "Copies of verifiable ledgers' "
                        "entries that did not match the ledger's Merkle root.",
                        registry=registry))
        return found


class ClientMetrics:
    """One client's view of the shared families; what the client's handles, runner and
    metadata writes call."""

    def __init__(self, registry=None, clock=time.monotonic):
        self.families = families(registry)
        self._clock = clock

    def timed_adds(self, callback):
        """``callback`` (an add callback: ``(first, last, error)``) wrapped to count and time
        the entries it confirms, from now."""
        started = self._clock()
        fam = self.families

        def counted(first: int, last: int, error) -> None:
            if error is None and first >= 0:
                n = last - first + 1
                fam.adds.inc(n)
                latency_s = self._clock() - started
                for _ in range(n):
                    fam.add_latency.observe(latency_s)
            callback(first, last, error)
        return counted

    def watch(self, op, fut: Future) -> None:
        """Count what operation ``op`` (run with Future ``fut``) read, once it is done: the
        entries it delivered, and those it asked of a next replica speculatively."""
        if not isinstance(op, ReadOp):
            return
        fam = self.families

        def done(f: Future) -> None:
            # the reader's record of the entries it moved on speculatively, per bookie
            moved = sum(len(s) for s in getattr(op, "_speculated", {}).values())
            if moved:
                fam.speculative_reads.inc(moved)
            if not f.cancelled() and f.exception() is None and isinstance(f.result(), list):
                fam.reads.inc(len(f.result()))
        fut.add_done_callback(done)

    def counted_metadata_writes(self, write_metadata):
        """``write_metadata`` (the I/O thread's CAS writer) wrapped to count ensemble changes
        written."""
        fam = self.families

        def write(action):
            event = write_metadata(action)
            if action.purpose == "ensemble" and isinstance(event, A.MetadataWritten):
                fam.ensemble_changes.inc()
            return event
        return write
