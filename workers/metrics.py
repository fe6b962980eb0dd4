"""The bookie's metrics: one table, Prometheus exposition through prometheus_client.

Theory of operation
-------------------
Every metric is a row of ``SPECS``: name, type, labels, meaning, and BookKeeper's name for it
where BookKeeper has one.  docs/metrics.md is generated from the table (``metrics_markdown``)
and a test checks it is current, so the documentation cannot drift from the code.

The workers use prometheus_client's *multiprocess mode*: the supervisor starts each worker with
``PROMETHEUS_MULTIPROC_DIR`` set to a directory of its run dir, each worker's values live in
memory-mapped files there, and the supervisor's ``MultiProcessCollector`` merges them at scrape
time (counters and histograms summed over every process that ever ran, so they never go back
when a worker is restarted; a dead worker's gauges are dropped with ``mark_process_dead``).
Why this and not a collector reading what the workers publish: histograms are merged by the
library, not by a file format of ours, and a worker killed with SIGKILL loses nothing it had
counted.  Figures only the supervisor knows (read-only state, disks, ring occupancy, restarts)
come from its own collector at scrape time (bookie.appliance.exposition).

Hot paths stay cheap: a multiprocess ``observe`` costs a lock and several mmap writes (about
10-20 us on a loaded host), too much per add request.  ``LocalHistogram`` and ``LocalCounter``
count in plain Python objects (about a microsecond) and ``flush`` moves the counts into the
library's values once a second, from the worker's loop.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SIZE_BUCKETS_BYTES = (1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # "counter", "gauge", "histogram"
    meaning: str
    labels: tuple[str, ...] = ()
    bookkeeper: str = ""  # BookKeeper's stat name, where it has one
    source: str = ""  # which process produces it
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S


SPECS: tuple[Spec, ...] = (
    # -- add worker ------------------------------------------------------------------------------
    Spec("bookie_add_entry_seconds", "histogram", "Latency of an add request (a batch of entries of one ledger), from taken off the socket to acknowledged (journal durable).", (), "BOOKIE_ADD_ENTRY", "add"),
    Spec("bookie_add_entries_total", "counter", "Entries acknowledged by the add worker.", (), "ADD_ENTRY (count)", "add"),
    Spec("bookie_add_bytes_total", "counter", "Bytes of entries accepted by the add worker.", (), "BOOKIE_ADD_ENTRY_BYTES", "add"),
    Spec("bookie_add_pending", "gauge", "Adds placed in the ring and waiting for the journal to make them durable.", (), "JOURNAL_QUEUE_SIZE (in requests)", "add"),
    Spec("bookie_checkpoint_seconds", "histogram", "Duration of a checkpoint: fdatasync the entry logs, sync the index, persist LastLogMark.", (), "", "add"),
    Spec("bookie_fences_total", "counter", "Fence records journaled for the read worker.", (), "", "add"),
    Spec("bookie_requests_total", "counter", "Requests answered, by operation (ADD, READ, READ_LAC, WRITE_LAC, INFO, FENCE) and status (OK or the error's name).", ("op", "status"), "ADD_ENTRY_REQUEST / READ_ENTRY_REQUEST (success and failure)", "add, read"),
    Spec("bookie_replies_dropped_total", "counter", "Answers that could not be sent (the client's queue was full or it was gone).", (), "", "add, read"),
    Spec("bookie_malformed_dropped_total", "counter", "Messages dropped unanswered: too few frames to answer.", (), "", "add, read"),
    Spec("bookie_internal_errors_total", "counter", "Requests that failed in a way no check foresaw (answered BAD_REQUEST, logged as 'request failed').", (), "", "add, read"),
    Spec("bookie_connections_refused_total", "counter", "Client connections shut down on accept because maxClientConnections were open.", (), "", "add, read"),
    Spec("bookie_add_quota_refused_total", "counter", "Normal adds refused OVER_QUOTA: their writer identity (an enrolled key, or the ledger's owner) would pass ledgerStorageQuotaBytes. No per-writer label (cardinality, privacy).", (), "", "add"),
    Spec("bookie_quota_identities_over", "gauge", "Writer identities at their ledgerStorageQuotaBytes on this bookie: holding it or more, or refused an add since what they hold last went down (0 without a quota).", (), "", "add"),
    Spec("bookie_connections_shut_flooding_total", "counter", "Client connections shut down for flooding: refused more than 1,000 times in one second (read socket: TOO_MANY_REQUESTS; add socket: any refusal but FENCED, READ_ONLY and OVER_QUOTA).", (), "", "add, read"),
    # -- read worker -----------------------------------------------------------------------------
    Spec("bookie_read_entry_seconds", "histogram", "Latency of a read request (an entry range, a read-LAC), from taken off the socket to answered; long polls and fences not counted.", (), "BOOKIE_READ_ENTRY", "read"),
    Spec("bookie_read_entries_total", "counter", "Entries read and sent to clients.", (), "READ_ENTRY (count)", "read"),
    Spec("bookie_read_bytes_total", "counter", "Bytes of entries read and sent to clients.", (), "BOOKIE_READ_ENTRY_BYTES", "read"),
    Spec("bookie_read_ahead_hits_total", "counter", "Entries the read worker served from its read-ahead cache (dbStorage_readAheadCacheMaxSizeMb).", (), "dbStorage read-cache-hits", "read"),
    Spec("bookie_read_ahead_misses_total", "counter", "Entries the read worker read from the entry logs while its read-ahead cache was on (each miss reads ahead dbStorage_readAheadCacheBatchSize entries' worth).", (), "dbStorage read-cache-misses", "read"),
    Spec("bookie_read_ahead_cache_bytes", "gauge", "Bytes held in the read worker's read-ahead cache.", (), "dbStorage read-cache-size", "read"),
    Spec("bookie_long_polls_parked", "gauge", "Read-LAC long polls waiting for their ledger to move.", (), "", "read"),
    Spec("bookie_fences_waiting", "gauge", "Fencing reads waiting for the add worker to journal the fence.", (), "", "read"),
    # -- journal worker --------------------------------------------------------------------------
    Spec("bookie_journal_force_write_seconds", "histogram", "Time to make one journal group durable: one writev of the group and its fdatasync; `journal` is the journal's index (0 for journalDirectory, i for the i-th of journalDirectories).", ("journal",), "JOURNAL_FORCE_WRITE_LATENCY", "journal"),
    Spec("bookie_journal_sync_seconds", "histogram", "Duration of the journal's fdatasync alone, per journal.", ("journal",), "JOURNAL_SYNC", "journal"),
    Spec("bookie_journal_group_bytes", "histogram", "Size of a journal group (bytes written with one fdatasync), per journal.", ("journal",), "JOURNAL_FORCE_WRITE_BATCH_BYTES", "journal", SIZE_BUCKETS_BYTES),
    Spec("bookie_journal_bytes_total", "counter", "Bytes made durable in the journal, per journal.", ("journal",), "", "journal"),
    Spec("bookie_journal_position_bytes", "gauge", "Logical end of the journal (the durable cursor), per journal (each journal has its own offsets).", ("journal",), "", "journal"),
    # -- GC worker -------------------------------------------------------------------------------
    Spec("bookie_gc_runs_total", "counter", "Garbage collection passes completed.", (), "", "gc"),
    Spec("bookie_gc_deleted_ledgers_total", "counter", "Ledgers dropped from the index because the metadata store no longer has them.", (), "", "gc"),
    Spec("bookie_gc_deleted_entry_logs_total", "counter", "Entry logs deleted because nothing live was left in them.", (), "", "gc"),
    Spec("bookie_gc_overreplicated_ledgers_total", "counter", "Ledgers whose copies the GC dropped because their metadata no longer names this bookie (gcOverreplicatedLedgerWaitTime).", (), "", "gc"),
    Spec("bookie_ledgers", "gauge", "Ledgers this bookie holds (in its index), as of the last GC pass.", (), "ACTIVE_LEDGER_COUNT", "gc"),
    Spec("bookie_entry_logs", "gauge", "Entry log files on the ledger disks, as of the last GC pass.", (), "ACTIVE_ENTRY_LOG_COUNT", "gc"),
    Spec("bookie_compaction_minor_runs_total", "counter", "Minor compaction passes started.", (), "MINOR_COMPACTION_COUNT", "gc"),
    Spec("bookie_compaction_major_runs_total", "counter", "Major compaction passes started.", (), "MAJOR_COMPACTION_COUNT", "gc"),
    Spec("bookie_compaction_logs_total", "counter", "Entry logs rewritten by compaction (their live entries copied, the file deleted).", (), "", "gc"),
    Spec("bookie_compaction_failed_logs_total", "counter", "Entry logs whose compaction was undone for a corrupt entry (the log is skipped from then on) or a disk error.", (), "", "gc"),
    Spec("bookie_compaction_logs_todo", "gauge", "Entry logs the running compaction pass has still to rewrite (0 between passes).", (), "", "gc"),
    Spec("bookie_compaction_bytes_copied_total", "counter", "Entry bytes compaction copied into new entry logs.", (), "", "gc"),
    Spec("bookie_compaction_bytes_reclaimed_total", "counter", "Disk space compaction gave back: the old logs' size minus the new logs' size.", (), "RECLAIMED_COMPACTION_SPACE_BYTES", "gc"),
    # -- supervisor (computed at scrape time) ----------------------------------------------------
    Spec("bookie_info", "gauge", "Always 1; the labels say which bookie and version this is.", ("bookie_id", "version"), "", "supervisor"),
    Spec("bookie_readonly", "gauge", "1 while the bookie refuses adds (forced, or a disk is full), else 0.", (), "SERVER_STATUS (inverted: BookKeeper reports 1 when writable)", "supervisor"),
    Spec("bookie_readonly_forced", "gauge", "1 while read-only is forced by an operator (admin API, SIGUSR1).", (), "", "supervisor"),
    Spec("bookie_readonly_journal_full", "gauge", "1 while read-only because a journal disk had no room for a journal write (it turns writable by itself once a write succeeds).", (), "", "supervisor"),
    Spec("bookie_disk_used_bytes", "gauge", "Bytes in use on the filesystem of a bookie directory.", ("directory", "kind"), "", "supervisor"),
    Spec("bookie_disk_total_bytes", "gauge", "Size of the filesystem of a bookie directory.", ("directory", "kind"), "", "supervisor"),
    Spec("bookie_ring_used_bytes", "gauge", "Bytes in the add -> journal rings not yet made durable by the journals (summed over the journals).", (), "JOURNAL_QUEUE_SIZE (in bytes)", "supervisor"),
    Spec("bookie_ring_capacity_bytes", "gauge", "Size of the add -> journal rings (journalRingSizeMB per journal, summed).", (), "", "supervisor"),
    Spec("bookie_worker_up", "gauge", "1 while the worker of this role runs.", ("role",), "", "supervisor"),
    Spec("bookie_worker_memory_kills_total", "counter", "Times the supervisor killed and restarted a worker of this role for passing workerMemoryLimitMB.", ("role",), "", "supervisor"),
    Spec("bookie_worker_anon_rss_bytes", "gauge", "A worker's anonymous resident memory (what workerMemoryLimitMB bounds), read at scrape time.", ("role",), "", "supervisor"),
    Spec("bookie_worker_restarts_total", "counter", "Times the supervisor restarted a worker of this role after it died.", ("role",), "", "supervisor"),
    Spec("bookie_admin_http_unauthorized_total", "counter", "Admin API requests refused with 401 (no, a malformed or a wrong bearer token; httpServerAuthTokenFile set).", (), "", "supervisor"),
    # -- autorecovery worker (docs/autorecovery.md) ----------------------------------------------
    Spec("bookie_autorecovery_auditor", "gauge", "1 while this bookie's autorecovery worker is the elected auditor, else 0.", (), "", "autorecovery"),
    Spec("bookie_autorecovery_marked_ledgers_total", "counter", "Ledgers the auditor marked under-replicated (a lost bookie named in them).", (), "auditor NUM_UNDER_REPLICATED_LEDGERS", "autorecovery"),
    Spec("bookie_autorecovery_lost_ledgers_total", "counter", "Ledgers reported (once each) with entries that have no live copy left: data lost, not retried.", (), "", "autorecovery"),
    Spec("bookie_autorecovery_rereplicated_ledgers_total", "counter", "Ledgers this worker healed (every fragment repointed off the lost bookies).", (), "replication_worker NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED", "autorecovery"),
    Spec("bookie_autorecovery_rereplicated_entries_total", "counter", "Entries this worker copied to replacement bookies or back to bookies that lacked them.", (), "replication_worker NUM_ENTRIES_WRITTEN", "autorecovery"),
    Spec("bookie_autorecovery_rereplicated_bytes_total", "counter", "Bytes of entries this worker copied.", (), "replication_worker NUM_BYTES_WRITTEN", "autorecovery"),
)

SPEC_BY_NAME = {s.name: s for s in SPECS}

# Figures the workers publish as a stats dict (WorkerContext.write_stats) -> the metric they feed.
# Counters in the dict are running totals (the difference is added); gauges are set.
STAT_METRICS = {
    "add_entries_total": "bookie_add_entries_total",
    "add_bytes_total": "bookie_add_bytes_total",
    "add_pending": "bookie_add_pending",
    "fences_total": "bookie_fences_total",
    "add_quota_refused_total": "bookie_add_quota_refused_total",
    "quota_identities_over": "bookie_quota_identities_over",
    "replies_dropped_total": "bookie_replies_dropped_total",
    "read_entries_total": "bookie_read_entries_total",
    "read_bytes_total": "bookie_read_bytes_total",
    "read_ahead_hits_total": "bookie_read_ahead_hits_total",
    "read_ahead_misses_total": "bookie_read_ahead_misses_total",
    "read_ahead_cache_bytes": "bookie_read_ahead_cache_bytes",
    "long_polls_parked": "bookie_long_polls_parked",
    "fences_waiting": "bookie_fences_waiting",
    "dropped_malformed_total": "bookie_malformed_dropped_total",
    "internal_errors_total": "bookie_internal_errors_total",
    "connections_refused_total": "bookie_connections_refused_total",
    "connections_shut_flooding_total": "bookie_connections_shut_flooding_total",
    "journal_bytes_total": "bookie_journal_bytes_total",
    "journal_position_bytes": "bookie_journal_position_bytes",
    "gc_runs_total": "bookie_gc_runs_total",
    "gc_deleted_ledgers_total": "bookie_gc_deleted_ledgers_total",
    "gc_deleted_logs_total": "bookie_gc_deleted_entry_logs_total",
    "gc_overreplicated_ledgers_total": "bookie_gc_overreplicated_ledgers_total",
    "ledgers": "bookie_ledgers",
    "entry_logs": "bookie_entry_logs",
    "compaction_minor_runs_total": "bookie_compaction_minor_runs_total",
    "compaction_major_runs_total": "bookie_compaction_major_runs_total",
    "compaction_logs_total": "bookie_compaction_logs_total",
    "compaction_failed_logs_total": "bookie_compaction_failed_logs_total",
    "compaction_logs_todo": "bookie_compaction_logs_todo",
    "compaction_bytes_copied_total": "bookie_compaction_bytes_copied_total",
    "compaction_bytes_reclaimed_total": "bookie_compaction_bytes_reclaimed_total",
}

# Figures of the stats dicts that other metrics already cover (rejected_*_total too:
# bookie_requests_total counts every answer by status).
COVERED_ELSEWHERE = {
    "add_requests_total", "read_requests_total", "read_lac_total", "fence_requests_total",  # requests_total
    "checkpoints_total",  # bookie_checkpoint_seconds_count
    "journal_syncs_total", "journal_groups_total",  # bookie_journal_*_seconds_count
    "ring_free_bytes",  # bookie_ring_used_bytes, from the supervisor
    "entries_stored_total", "journal_file_id",
    "connections_open",  # per worker, for logs and tests; bookie_requests_total shows the load
    "read_reply_bytes_queued",
}


class Metrics:
    """A worker's metrics: the library's objects, created on first use (a worker only writes
    files for what it measures), and the local accumulators its hot paths use."""

    def __init__(self):
        self._objects: dict[str, object] = {}
        self._local: list = []
        self._published: dict[str, float] = {}
        self._lock = threading.Lock()

    def metric(self, name: str):
        """The prometheus_client object of ``name`` (created unregistered: the supervisor's
        collector reads the multiprocess files, not a registry of this process)."""
        obj = self._objects.get(name)
        if obj is None:
            from prometheus_client import Counter, Gauge, Histogram  # lazy: prometheus_client

            spec = SPEC_BY_NAME[name]
            if spec.kind == "counter":
                obj = Counter(name, spec.meaning, spec.labels, registry=None)
            elif spec.kind == "gauge":
                obj = Gauge(name, spec.meaning, spec.labels, registry=None, multiprocess_mode="livesum")
            else:
                obj = Histogram(name, spec.meaning, spec.labels, registry=None, buckets=spec.buckets)
            self._objects[name] = obj
        return obj

    def histogram(self, name: str, *labels: str) -> "LocalHistogram":
        """A local accumulator of histogram ``name`` (of its child ``labels`` when it has labels)."""
        metric = self.metric(name)
        h = LocalHistogram(metric.labels(*labels) if labels else metric)
        self._local.append(h)
        return h

    def counter(self, name: str) -> "LocalCounter":
        c = LocalCounter(self.metric(name))
        self._local.append(c)
        return c

    def publish(self, stats: dict, labels: tuple[str, ...] = ()) -> list[str]:
        """Feed a worker's stats dict into the metrics it maps to (STAT_METRICS), a labelled
        metric's child ``labels`` (the worker's own: a journal's index); returns the keys no
        metric takes (the caller may log them once)."""
        unknown = []
        for key, value in stats.items():
            name = STAT_METRICS.get(key)
            if name is None:
                if not key.startswith("rejected_") and key not in COVERED_ELSEWHERE:
                    unknown.append(key)
                continue
            m = self.metric(name)
            if SPEC_BY_NAME[name].labels:
                m = m.labels(*labels)
            if SPEC_BY_NAME[name].kind == "counter":
                delta = value - self._published.get(key, 0)
                if delta > 0:
                    m.inc(delta)
            else:
                m.set(value)
            self._published[key] = value
        return unknown

    def flush(self) -> None:
        """Move what the local accumulators counted into the library's values (once a second;
        any thread)."""
        with self._lock:
            for acc in self._local:
                acc.flush()


class LocalHistogram:
    """Observations counted locally; ``flush`` adds them to a prometheus_client Histogram.

    prometheus_client has no public "observe n values" call; its Histogram keeps one value per
    bucket (not cumulative) and one sum, which ``flush`` increments by what was counted, exactly
    as ``observe`` would have (tests/unit/test_metrics.py checks the two agree).
    """

    __slots__ = ("_hist", "_bounds", "_counts", "_sum", "_lock")

    def __init__(self, hist):
        self._hist = hist
        self._bounds = list(hist._upper_bounds)
        self._counts = [0] * len(self._bounds)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def observe_locked(self, value: float) -> None:
        """For observers on another thread than the one that flushes."""
        with self._lock:
            self.observe(value)

    def flush(self) -> None:
        with self._lock:
            counts, total = self._counts, self._sum
            self._counts = [0] * len(self._bounds)
            self._sum = 0.0
        if not any(counts):
            return
        for i, n in enumerate(counts):
            if n:
                self._hist._buckets[i].inc(n)
        self._hist._sum.inc(total)


class LocalCounter:
    """Increments counted locally, by label values; ``flush`` adds them to the Counter."""

    __slots__ = ("_counter", "counts")

    def __init__(self, counter):
        self._counter = counter
        self.counts: dict[tuple, int] = {}

    def inc(self, *labels, n: int = 1) -> None:
        self.counts[labels] = self.counts.get(labels, 0) + n

    def flush(self) -> None:
        counts, self.counts = self.counts, {}
        for labels, n in counts.items():
            (self._counter.labels(*labels) if labels else self._counter).inc(n)


# Documented label values a family carries from the first scrape (zero until counted).
REQUEST_OPS = ("ADD", "READ", "READ_LAC", "WRITE_LAC", "INFO", "FENCE")
DOCUMENTED_LABELS: dict[str, tuple[tuple[str, ...], ...]] = {
    "bookie_requests_total": tuple((op, "OK") for op in REQUEST_OPS),
    **{name: (("0",),) for name in ("bookie_journal_force_write_seconds", "bookie_journal_sync_seconds",
                                     "bookie_journal_group_bytes", "bookie_journal_bytes_total",
                                     "bookie_journal_position_bytes")},  # journal 0 is always there
}


def family_name(spec: Spec) -> str:
    """The name prometheus_client gives the family of ``spec`` (a counter's without _total)."""
    return spec.name[:-len("_total")] if spec.kind == "counter" else spec.name


def zero_family(spec: Spec, label_values=()):
    """A family of ``spec`` with one zero sample per label set in ``label_values`` (one
    unlabelled sample when the spec has no labels)."""
    from prometheus_client.core import (  # lazy: prometheus_client
        CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)

    labels = list(spec.labels) or None
    sets = list(label_values) if spec.labels else [()]
    if spec.kind == "counter":
        family = CounterMetricFamily(family_name(spec), spec.meaning, labels=labels)
        for values in sets:
            family.add_metric(list(values), 0)
    elif spec.kind == "gauge":
        family = GaugeMetricFamily(spec.name, spec.meaning, labels=labels)
        for values in sets:
            family.add_metric(list(values), 0)
    else:
        family = HistogramMetricFamily(spec.name, spec.meaning, labels=labels)
        buckets = [(repr(float(b)), 0) for b in spec.buckets] + [("+Inf", 0)]
        for values in sets:
            family.add_metric(list(values), buckets, 0)
    return family


class FromFirstScrape:
    """Wraps the collector of the workers' figures so that every family of ``SPECS`` a worker
    produces is exported from the first scrape on, with every documented label value: zero
    until its first event (an alert on ``increase(bookie_internal_errors_total[5m])`` fires on
    the first error, not the second; a dashboard shows 0, not "no data").

    A worker's families appear in its multiprocess files only once it touches them, and some
    (compaction, autorecovery) wait for their first pass; what no process has written yet is
    zero by definition: nothing was counted, no pass ran.  The supervisor's own families come
    from its collector, always.
    """

    def __init__(self, inner, specs: tuple[Spec, ...] = SPECS):
        self.inner = inner
        self.specs = [s for s in specs if s.source != "supervisor"]

    def collect(self):
        seen = {}
        for family in self.inner.collect():
            seen[family.name] = family
        for spec in self.specs:
            family = seen.get(family_name(spec))
            documented = DOCUMENTED_LABELS.get(spec.name, ())
            if family is None:
                seen[family_name(spec)] = zero_family(spec, documented)
                continue
            present = {tuple(s.labels.get(k, "") for k in spec.labels) for s in family.samples}
            missing = [v for v in documented if v not in present]
            if missing:
                family.samples.extend(zero_family(spec, missing).samples)
        yield from seen.values()


def metrics_markdown() -> str:
    """The metric table as Markdown, for docs/metrics.md."""
    rows = ["| name | type | labels | from | BookKeeper | meaning |",
            "| --- | --- | --- | --- | --- | --- |"]
    for s in SPECS:
        labels = ", ".join(f"`{x}`" for x in s.labels) or "-"
        rows.append(f"| `{s.name}` | {s.kind} | {labels} | {s.source} | {s.bookkeeper or '-'} | {s.meaning} |")
    return "\n".join(rows)
