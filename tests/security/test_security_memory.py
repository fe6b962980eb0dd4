"""Issue 15: a worker's memory is bounded even where no request limit can reach.

ZeroMQ holds a message of many frames (each under ``ZMQ_MAXMSGSIZE``) whole until its last frame
arrives, before the worker sees any of it.  The supervisor's memory watch
(``workerMemoryLimitMB``, appliance/memory_watch.py) kills and restarts a worker past its
budget: the sender's connection and what it buffered go, the bookie keeps serving, and the
restart does not count towards ``workerRestartLimit``.
"""

import time

import pytest
import zmq

from bookie import wire
from bookie.appliance.memory_watch import anon_rss_bytes
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Op, Status

LIMIT_MB = 160
KEY = b"memory-test-master-key"


@pytest.fixture
def ens():
    conf = {"metadataServiceUri": "", "workerMemoryLimitMB": LIMIT_MB, "workerRestartLimit": 1}
    with LocalBookies(1, conf=conf) as e:
        yield e


def _send_many_frame_message(ctx, bookie: str, frames: int):
    """One ADD of ``frames`` 1 MiB frames: ZeroMQ buffers it whole before the worker sees it.
    Returns the socket: the caller keeps it open (closed, its unsent frames are dropped)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(f"tcp://{bookie}")
    s.send(wire.pack_header(Op.ADD, 0, 1, 5), zmq.SNDMORE)
    chunk = b"m" * (1 << 20)
    for _ in range(frames):
        s.send(chunk, zmq.SNDMORE)
    s.send(b"end")
    return s


def _killed(ens) -> int:
    return ens.log(0).count("worker over its memory limit")


def test_a_worker_past_its_memory_budget_is_restarted_and_the_bookie_serves_on(ens):
    add_pid = ens.worker_pid(0, "add")
    ctx = zmq.Context()
    try:
        # Until two kills (more than workerRestartLimit: still no stop); each message is five
        # budgets, and one that arrives between two looks of the watch may pass unseen.
        senders = []
        for _ in range(10):
            senders.append(_send_many_frame_message(ctx, ens.bookies[0], 5 * LIMIT_MB))
            deadline = time.monotonic() + 3
            seen = _killed(ens)
            while _killed(ens) == seen and time.monotonic() < deadline:
                time.sleep(0.05)
            if _killed(ens) >= 2:
                break
        assert _killed(ens) >= 2, ens.log(0)[-2000:]
    finally:
        ctx.destroy(linger=0)
    assert "role=add" in ens.log(0)
    deadline = time.monotonic() + 20
    while True:  # the restarted add worker serves a writer
        try:
            with RawBookieClient(ens.bookies[0], timeout_s=2) as c:
                assert c.add(7, [make_entry(7, 0, b"after")], KEY) == Status.OK
                assert c.read(7, 0)[0] == Status.OK
            break
        except Exception:  # noqa: BLE001 - still restarting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    new_pid = ens.worker_pid(0, "add")
    assert new_pid != add_pid and anon_rss_bytes(new_pid) < (LIMIT_MB << 20)
    assert "stopping the bookie" not in ens.log(0)
