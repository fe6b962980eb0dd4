"""Issue 15: a worker's memory is bounded even where no request limit can reach.

ZeroMQ holds a message of many frames (each under ``ZMQ_MAXMSGSIZE``) whole until its last frame
arrives, before the worker sees any of it.  The supervisor's memory watch
(``workerMemoryLimitMB``, appliance/memory_watch.py) kills and restarts a worker past its
budget: the sender's connection and what it buffered go, the bookie keeps serving, and the
restart does not count towards ``workerRestartLimit``.

The add worker now shuts a connection whose message still arriving passes the add size limit
(workers/frame_guard.py, tests/security/test_security_frames.py); the read worker, whose frames
are at most 4 KiB, still relies on the watch, so the watch is tested there.
"""

import subprocess
import sys
import time

import pytest

from bookie.appliance.memory_watch import anon_rss_bytes
from bookie.testing import LocalBookies
from bookie.testing.rawclient import known_resolver
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

LIMIT_MB = 160
KEY = b"memory-test-master-key"


@pytest.fixture
def ens():
    conf = {"metadataServiceUri": "", "workerMemoryLimitMB": LIMIT_MB, "workerRestartLimit": 1}
    with LocalBookies(1, conf=conf) as e:
        yield e


_SENDER = """
import sys, time, zmq
from bookie import wire
from bookie.wire import Op
address, mib, server_key = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
s = zmq.Context().socket(zmq.DEALER)
s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()  # ephemeral, the bookie's pinned
s.curve_serverkey = server_key
s.setsockopt(zmq.SNDHWM, 0)
s.setsockopt(zmq.LINGER, 0)
s.connect(address)
s.send(wire.pack_header(Op.READ, 0, 1, 5), zmq.SNDMORE)
chunk = b"m" * 4000
for _ in range(mib * 262):
    s.send(chunk, zmq.SNDMORE)
s.send(b"end")
time.sleep(3600)
"""


def _send_many_frame_message(bookie: str, mib: int) -> subprocess.Popen:
    """One READ of ``mib`` MiB in 4 KiB frames (the read socket's frame limit): ZeroMQ buffers
    it whole before the read worker sees it.  Sent from a process of its own, which stays until
    the caller kills it (closed, a socket's unsent frames are dropped), so the test's process
    never holds the hundreds of MiB queued."""
    target = known_resolver(bookie).resolve(bookie)  # the key the bookie proves
    return subprocess.Popen([sys.executable, "-c", _SENDER,
                             f"tcp://{target.host}:{target.port + 1}", str(mib),
                             target.key.decode()])


def _stop(sender: subprocess.Popen) -> None:
    sender.kill()
    sender.wait()


def _killed(ens) -> int:
    return ens.log(0).count("worker over its memory limit")


def test_a_worker_past_its_memory_budget_is_restarted_and_the_bookie_serves_on(ens):
    read_pid = ens.worker_pid(0, "read")
    senders = []
    try:
        # Until two kills (more than workerRestartLimit: still no stop); each message is five
        # budgets, and one that arrives between two looks of the watch may pass unseen.
        for _ in range(10):
            senders.append(_send_many_frame_message(ens.bookies[0], 5 * LIMIT_MB))
            deadline = time.monotonic() + 3
            seen = _killed(ens)
            while _killed(ens) == seen and time.monotonic() < deadline:
                time.sleep(0.05)
            if _killed(ens) > seen:  # the kill took their connections: no sender is needed
                while senders:
                    _stop(senders.pop())
            if _killed(ens) >= 2:
                break
        assert _killed(ens) >= 2, ens.log(0)[-2000:]
    finally:
        for sender in senders:
            _stop(sender)
    assert "role=read" in ens.log(0)
    deadline = time.monotonic() + 20
    while True:  # the restarted read worker serves a reader
        try:
            with RawBookieClient(ens.bookies[0], timeout_s=2) as c:
                assert c.add(7, [make_entry(7, 0, b"after")], KEY) == Status.OK
                assert c.read(7, 0)[0] == Status.OK
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    new_pid = ens.worker_pid(0, "read")
    assert new_pid != read_pid and anon_rss_bytes(new_pid) < (LIMIT_MB << 20)
    assert "stopping the bookie" not in ens.log(0)
