"""bench writes' add loop against a scripted ledger handle: throttle, limits, pacing, failures,
counts.  (The tool end to end through the real client is in test_bench_tools.py.)"""

import queue
import threading
import time

import pytest

from bookie.bench.load import AddLoad, BenchError
from bookie.bench.report import Meter


class ScriptedHandle:
    """Completes each add on another thread after ``delay_s``; fails every ``fail_every``-th."""

    def __init__(self, delay_s=0.0, fail_every=0, never=False):
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.never = never
        self.adds = []
        self.outstanding = 0
        self.max_outstanding = 0
        self.lock = threading.Lock()
        self.q = queue.Queue()
        self.thread = threading.Thread(target=self._complete, daemon=True)
        self.thread.start()

    def add_entries_callback(self, payloads, callback):
        """The client's bulk path: consecutive ids, each reported as a range of one."""
        for data in payloads:
            with self.lock:
                entry_id = len(self.adds)
                self.adds.append(data)
                self.outstanding += 1
                self.max_outstanding = max(self.max_outstanding, self.outstanding)
                n = len(self.adds)
            if not self.never:
                self.q.put((time.monotonic() + self.delay_s, entry_id, callback,
                            self.fail_every and n % self.fail_every == 0))

    def _complete(self):
        while True:
            due, entry_id, callback, fail = self.q.get()
            if callback is None:
                return
            time.sleep(max(due - time.monotonic(), 0))
            with self.lock:
                self.outstanding -= 1
            callback(entry_id, entry_id, RuntimeError("scripted failure") if fail else None)

    def stop(self):
        self.q.put((0, 0, None, False))
        self.thread.join(5)


@pytest.fixture
def handles():
    made = []

    def make(n=1, **kw):
        made.extend(ScriptedHandle(**kw) for _ in range(n))
        return made[-n:]
    yield make
    for h in made:
        h.stop()


def test_sendlimit_adds_exactly_that_many_round_robin(handles):
    hs = handles(3)
    meter = Meter("writes", emit=None)
    load = AddLoad(hs, lambda t: b"x" * 10, throttle=50, rate=None, limit=1000, meter=meter,
                   nbytes=10)
    load.run(duration_s=30, timeout_s=5)
    fig = meter.finish(time.monotonic_ns())
    assert [len(h.adds) for h in hs] == [334, 333, 333]
    assert fig["ops"] == 1000 and fig["bytes"] == 10_000 and fig["errors"] == 0
    assert fig["latency_ms"]["count"] == 1000


def test_throttle_bounds_the_adds_outstanding(handles):
    (h,) = handles(1, delay_s=0.002)
    load = AddLoad([h], lambda t: b"", throttle=7, rate=None, limit=300,
                   meter=Meter("w", emit=None), nbytes=0)
    load.run(None, timeout_s=5)
    assert h.max_outstanding <= 7 and load.completed == 300


def test_failures_are_counted_and_kept(handles):
    (h,) = handles(1, fail_every=10)
    meter = Meter("w", emit=None)
    load = AddLoad([h], lambda t: b"", throttle=20, rate=None, limit=200, meter=meter, nbytes=0)
    load.run(None, timeout_s=5)
    fig = meter.finish(time.monotonic_ns())
    assert fig["errors"] == 20 and fig["ops"] == 180
    assert isinstance(load.first_error, RuntimeError)


def test_paced_adds_follow_the_schedule_and_keep_latencies(handles):
    (h,) = handles(1)
    issued = []
    load = AddLoad([h], lambda t: issued.append(t) or b"", throttle=100, rate=1000.0,
                   limit=None, meter=Meter("w", emit=None), nbytes=0, keep_latencies=True)
    load.run(duration_s=0.3, timeout_s=5)
    assert 250 <= len(issued) <= 301
    gaps = {b - a for a, b in zip(issued, issued[1:])}
    assert gaps <= {1_000_000, 999_999, 1_000_001}  # intended times, 1 ms apart
    assert len(load.latencies()) == len(issued) and (load.latencies() >= 0).all()


def test_adds_that_never_complete_time_out(handles):
    (h,) = handles(1, never=True)
    load = AddLoad([h], lambda t: b"", throttle=5, rate=None, limit=None,
                   meter=Meter("w", emit=None), nbytes=0)
    with pytest.raises(BenchError, match="no add completed within 0.3 s"):
        load.run(duration_s=5, timeout_s=0.3)
