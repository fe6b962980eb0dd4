"""The bookie's Prometheus registry, as the supervisor serves it.

One registry per bookie, served by both ``/metrics`` endpoints (``prometheusStatsHttpPort`` and
the admin API's): prometheus_client's ``MultiProcessCollector`` over the workers' multiprocess
directory (``bookie.workers.metrics`` says why multiprocess mode), and ``SupervisorCollector``
for what only the supervisor knows, computed at scrape time.
"""

from __future__ import annotations

import os
import shutil

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from bookie import __version__
from bookie.appliance.memory_watch import anon_rss_bytes
from bookie.workers.metrics import SPEC_BY_NAME, FromFirstScrape
from bookie.storage.ring import DURABLE, WRITE

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _gauge(name: str, labels=()):
    return GaugeMetricFamily(name, SPEC_BY_NAME[name].meaning, labels=list(labels) or None)


class SupervisorCollector:
    """Figures of the supervisor, read when Prometheus scrapes (nothing is kept between)."""

    def __init__(self, sup):
        self.sup = sup

    def collect(self):
        sup = self.sup
        conf = sup.conf
        info = _gauge("bookie_info", ("bookie_id", "version"))
        info.add_metric([conf.bookie_id, __version__], 1)
        yield info
        ro = _gauge("bookie_readonly")
        ro.add_metric([], int(sup.readonly))
        yield ro
        forced = _gauge("bookie_readonly_forced")
        forced.add_metric([], int(sup.forced_readonly))
        yield forced
        journal_full = _gauge("bookie_readonly_journal_full")
        journal_full.add_metric([], int(sup.journal_full))
        yield journal_full
        used = _gauge("bookie_disk_used_bytes", ("directory", "kind"))
        total = _gauge("bookie_disk_total_bytes", ("directory", "kind"))
        for kind, d in [*(("journal", x) for x in conf.journal_dirs), *(("ledger", x) for x in conf.ledger_dirs)]:
            try:
                u = shutil.disk_usage(d)
            except OSError:
                continue
            used.add_metric([d, kind], u.total - u.free)
            total.add_metric([d, kind], u.total)
        yield used
        yield total
        rings = list(getattr(sup, "rings", []))  # one per journal: summed
        if rings:
            occupancy = _gauge("bookie_ring_used_bytes")
            occupancy.add_metric([], sum(max(0, r.get(WRITE) - r.get(DURABLE)) for r in rings))
            yield occupancy
            capacity = _gauge("bookie_ring_capacity_bytes")
            capacity.add_metric([], sum(r.capacity for r in rings))
            yield capacity
        up = _gauge("bookie_worker_up", ("role",))
        restarts = CounterMetricFamily("bookie_worker_restarts",
                                       SPEC_BY_NAME["bookie_worker_restarts_total"].meaning,
                                       labels=["role"])
        kills = CounterMetricFamily("bookie_worker_memory_kills",
                                    SPEC_BY_NAME["bookie_worker_memory_kills_total"].meaning,
                                    labels=["role"])
        rss = _gauge("bookie_worker_anon_rss_bytes", ("role",))
        for role, w in list(sup.workers.items()):  # the supervisor adds workers meanwhile
            alive = w.proc is not None and w.proc.poll() is None
            up.add_metric([role], int(alive))
            restarts.add_metric([role], getattr(w, "restarts_total", 0))
            kills.add_metric([role], getattr(w, "memory_kills_total", 0))
            anon = anon_rss_bytes(w.proc.pid) if alive else None
            if anon is not None:
                rss.add_metric([role], anon)
        yield up
        yield restarts
        yield kills
        yield rss
        auth = getattr(sup.admin_http, "auth", None)  # None: no admin API, or one without a token
        refused = CounterMetricFamily("bookie_admin_http_unauthorized",
                                      SPEC_BY_NAME["bookie_admin_http_unauthorized_total"].meaning)
        refused.add_metric([], auth.refused_total if auth is not None else 0)
        yield refused


class BookieRegistry:
    """The registry of one bookie run.  ``worker_env()`` is what each worker is started with;
    ``worker_gone(pid)`` after a worker exits drops its live gauges."""

    def __init__(self, sup, run_dir: str):
        self.dir = os.path.join(run_dir, "metrics")
        os.makedirs(self.dir, exist_ok=True)
        self.registry = CollectorRegistry(auto_describe=False)
        # every documented family from the first scrape, zero until its first event
        self.registry.register(FromFirstScrape(MultiProcessCollector(None, path=self.dir)))
        self.registry.register(SupervisorCollector(sup))

    def worker_env(self) -> dict:
        return {**os.environ, MULTIPROC_ENV: self.dir}

    def worker_gone(self, pid: int) -> None:
        try:
            mark_process_dead(pid, self.dir)
        except OSError:
            pass

    def text(self) -> bytes:
        return generate_latest(self.registry)
