"""A parked long poll learns the LAC an add carries when the bookie takes the add, not when the
journal has made it durable (docs/architecture.md "Long polls and the LAC"); the add itself is
still answered only after its fdatasync.

The journal worker is stopped (SIGSTOP) to stand for a journal disk that takes forever: entry 1,
carrying LAC 0, is taken but cannot become durable.  The poll must be answered anyway, with the
carried LAC 0 (a statement about entry 0, acknowledged earlier), while entry 1's add stays
unanswered until the journal runs again.  Before the change the poll waited for entry 1's
fsync, i.e. here for its whole timeout.
"""

import signal
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"master-key-0123456789"
POLL_TIMEOUT_MS = 120_000  # an answer before it did not wait for the stopped journal


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"metadataServiceUri": "", "diskCheckInterval": 100}) as e:
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
            assert waited < POLL_TIMEOUT_MS / 1000, "the long poll waited for the journal"
            # durability is unchanged: the add that carried the LAC is not acknowledged
            assert not client.add_sock.poll(200), "an add was answered before its fdatasync"
        finally:
            ens.kill_worker(0, "journal", signal.SIGCONT)
        assert client.wait(client.add_sock, rid)[0] == Status.OK
        assert client.read(ledger, 0, 2) == (Status.OK, [make_entry(ledger, 0, b"e0", lac=-1),
                                                         make_entry(ledger, 1, b"e1", lac=0)])
