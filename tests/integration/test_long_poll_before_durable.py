"""A parked long poll learns the LAC an add carries when the bookie takes the add, not when the
journal has made it durable (docs/architecture.md "Long polls and the LAC"); the add itself is
still answered only after its fdatasync.

The journal worker is stopped (SIGSTOP) to stand for a journal disk that takes forever: entry 1,
carrying LAC 0, is taken but cannot become durable.  The poll must be answered anyway, with the
carried LAC 0 (a statement about entry 0, acknowledged earlier), while entry 1's add stays
unanswered until the journal runs again.  Before the change the poll waited for entry 1's
fsync, i.e. here for its whole timeout.

The add worker tells the read worker that a ledger moved only while a long poll waits on it
(workers/add_worker.py ``publish_moved``, ``take_watches``): the read worker subscribes to a
ledger's notices when a poll parks on it, and the add worker answers each new subscription with
a notice at once, so a poll parked just before its subscription arrived misses no commit.
Before that change: a notice for every ledger that moved, on every loop of the add worker,
polled or not (``bookie_lac_notices_total`` counts them now), and no notice on a subscription.
"""

import glob
import os
import signal
import tempfile
import threading
import time
import urllib.request

import pytest
import zmq

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"master-key-0123456789"
POLL_TIMEOUT_MS = 8000


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"metadataServiceUri": "", "diskCheckInterval": 100},
                      admin_http=True) as e:
        yield e


def test_long_poll_is_answered_before_the_carrying_add_is_durable(ens):
    ledger = 4242
    with RawBookieClient(ens.bookies[0], timeout_s=POLL_TIMEOUT_MS / 1000 + 5) as client:
        assert client.add(ledger, [make_entry(ledger, 0, b"e0", lac=-1)], KEY) == Status.OK
        journal = ens.kill_worker(0, "journal", signal.SIGSTOP)
        try:
            rid = client.send_add(ledger, [make_entry(ledger, 1, b"e1", lac=0)], KEY)
            t0 = time.monotonic()
            answer = client.read_lac(ledger, long_poll=(-1, POLL_TIMEOUT_MS))
            waited = time.monotonic() - t0
            assert answer == (Status.OK, 0, 1)
            assert waited < 2.0, f"long poll waited {waited:.2f} s for the journal"
            # durability is unchanged: the add that carried the LAC is not acknowledged
            assert not client.add_sock.poll(200), "an add was answered before its fdatasync"
        finally:
            ens.kill_worker(0, "journal", signal.SIGCONT)
        assert client.wait(client.add_sock, rid)[0] == Status.OK
        assert client.read(ledger, 0, 2) == (Status.OK, [make_entry(ledger, 0, b"e0", lac=-1),
                                                         make_entry(ledger, 1, b"e1", lac=0)])


def notices(ens) -> float:
    with urllib.request.urlopen(f"{ens.admin_url(0)}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("bookie_lac_notices_total"))


def wait_stats(ens, want, timeout_s=15.0) -> float:
    """The counter once the add worker published it (its stats go out once a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = notices(ens)
        if want(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_notices_go_only_to_ledgers_with_a_waiting_poll(ens):
    ledger = 5151
    with RawBookieClient(ens.bookies[0], timeout_s=15) as writer, \
            RawBookieClient(ens.bookies[0], timeout_s=15) as reader:
        time.sleep(1.2)  # past a stats interval of the add worker (1 s): earlier tests' notices
        before = notices(ens)
        for e in range(30):
            assert writer.add(ledger, [make_entry(ledger, e, b"x", lac=e - 1)], KEY) == Status.OK
        time.sleep(1.2)
        assert notices(ens) == before  # nobody polled: no notice

        answers = []
        poll = threading.Thread(target=lambda: answers.append(
            reader.read_lac(ledger, long_poll=(28, 10_000))))
        t0 = time.monotonic()
        poll.start()
        time.sleep(0.5)  # the poll parks (LAC 28 is what the bookie knows)
        assert writer.add(ledger, [make_entry(ledger, 30, b"x", lac=29)], KEY) == Status.OK
        poll.join(15)
        waited = time.monotonic() - t0
        assert answers == [(Status.OK, 29, 30)]
        assert waited < 5.0, f"the poll waited {waited:.2f} s"
        # the subscription's own notice and the add's
        assert wait_stats(ens, lambda n: n > before) > before


def test_a_new_watch_gets_a_notice_at_once(ens):
    """What closes the gap between a poll parking and its subscription reaching the add
    worker: the add worker answers the subscription itself with a notice of the ledger."""
    port = ens.bookies[0].rsplit(":", 1)[1]
    (endpoint,) = glob.glob(os.path.join(tempfile.gettempdir(), f"bk{port}-*", "add.lac"))
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    try:
        sub.connect(f"ipc://{endpoint}")
        sub.setsockopt(zmq.SUBSCRIBE, wire.LEDGER_ID.pack(777))
        assert sub.poll(10_000), "no notice for a new watch"
        assert wire.LEDGER_ID.unpack(sub.recv()) == (777,)
    finally:
        sub.close()
        ctx.term()
