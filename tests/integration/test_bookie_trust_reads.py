"""What a client may trust of one bookie's answers, under load and next to other clients:
an acknowledged entry is readable by everyone at once, one client's wrong key does not decide
another's fence, a ledger the GC dropped stays dropped, and a long poll never kills a worker."""

import threading
import time

import pytest
import zmq

from bookie import wire
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from zsockets import pin
from bookie.wire import Flag, Op, Status

KEY = b"trusted-master-key"
GC_WAIT_MS = 200


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"gcWaitTime": GC_WAIT_MS, "flushInterval": 100}) as e:
        yield e


@pytest.fixture(scope="module")
def store(ens):
    with open_metadata(ens.metadata_uri) as s:
        yield s


@pytest.fixture
def client(ens):
    with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
        yield c


def new_ledger(ens, store) -> int:
    """A ledger that exists in the metadata store (so the GC keeps it)."""
    ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
    return ledger_id


def wait_for(pred, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def collect(sock, request_ids, timeout_s: float = 10.0) -> dict[int, tuple[int, list]]:
    """Answers to the given pipelined requests: request id -> (status, frames after the header)."""
    got = {}
    deadline = time.monotonic() + timeout_s
    while set(request_ids) - set(got) and time.monotonic() < deadline:
        if sock.poll(50):
            frames = sock.recv_multipart()
            _, status, rid, _ = wire.unpack_header(frames[0])
            got[rid] = (status, frames[1:])
    return got


def no_worker_died(ens) -> None:
    log = ens.log(0)
    assert "worker died" not in log and "Traceback" not in log, log[-3000:]


# -- 2. read-after-ack under load -------------------------------------------------------------------

class BulkReader(threading.Thread):
    """Keeps the read worker busy: a window of large pipelined READs of one ledger."""

    def __init__(self, bookie_id: str, ledger_id: int, n_entries: int, window: int = 16):
        super().__init__(daemon=True)
        self.bookie_id, self.ledger_id, self.n_entries, self.window = bookie_id, ledger_id, n_entries, window
        self.stop = threading.Event()
        self.reads = 0
        self.errors = []

    def run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        host, port = pin(sock, self.bookie_id)
        sock.connect(f"tcp://{host}:{int(port) + 1}")
        rid = 0
        in_flight = 0
        try:
            while not self.stop.is_set():
                while in_flight < self.window:
                    rid += 1
                    first = (rid * 97) % self.n_entries
                    sock.send_multipart([wire.pack_header(Op.READ, 0, rid, self.ledger_id),
                                         wire.READ_BODY.pack(first, 1000)])
                    in_flight += 1
                if sock.poll(10_000):
                    frames = sock.recv_multipart()
                    in_flight -= 1
                    self.reads += 1
                    if wire.unpack_header(frames[0])[1] != Status.OK:
                        self.errors.append(wire.unpack_header(frames[0]))
                else:
                    self.errors.append("bulk read not answered in 10 s")
                    return
        finally:
            sock.close()
            ctx.term()


def test_an_entry_acknowledged_during_a_bulk_read_is_readable_at_once_by_its_writer(ens, store, client):
    bulk = new_ledger(ens, store)
    payload = b"b" * 1024
    for k in range(0, 4000, 500):
        assert client.add(bulk, [make_entry(bulk, i, payload) for i in range(k, k + 500)], KEY) == Status.OK
    reader = BulkReader(ens.bookies[0], bulk, 4000)
    reader.start()
    try:
        assert wait_for(lambda: reader.reads > 50, timeout_s=30)
        reads_before = reader.reads
        ledger = new_ledger(ens, store)
        stale = []
        for i in range(150):
            entry = make_entry(ledger, i, b"fresh %d" % i, lac=i - 1)
            assert client.add(ledger, [entry], KEY) == Status.OK
            status, got = client.read(ledger, i)
            if (status, got) != (Status.OK, [entry]):
                stale.append((i, Status(status).name))
        reads_during = reader.reads - reads_before
        assert not stale, f"{len(stale)} of 150 acknowledged entries not readable at once: {stale[:5]}"
    finally:
        reader.stop.set()
        reader.join(10)
    assert not reader.errors, reader.errors[:3]
    assert reads_during > 0, "the bulk reader made no progress while the entries were added"


# -- 4. fences with different master keys ------------------------------------------------------------

@pytest.mark.parametrize("wrong_first", [True, False])
def test_fences_with_different_master_keys_each_get_their_own_answer(ens, store, client, wrong_first):
    ledger = new_ledger(ens, store)
    assert client.add(ledger, [make_entry(ledger, 0, b"e0")], KEY) == Status.OK
    sock = client.read_sock
    keys = [b"not-the-key", KEY, b"also-wrong"] if wrong_first else [KEY, b"not-the-key", b"also-wrong"]
    rids = {}
    for n, key in enumerate(keys):
        rid = 1000 + n
        sock.send_multipart([wire.pack_header(Op.READ_LAC, Flag.FENCE, rid, ledger), key])
        rids[rid] = key
    got = collect(sock, list(rids))
    assert set(got) == set(rids), "a fence request got no answer"
    for rid, key in rids.items():
        want = Status.OK if key == KEY else Status.UNAUTHORIZED
        assert got[rid][0] == want, (key, Status(got[rid][0]).name)
    assert client.add(ledger, [make_entry(ledger, 1, b"e1")], KEY) == Status.FENCED


# -- 8. no resurrected ledgers -------------------------------------------------------------------------

def test_entries_that_reach_the_bookie_after_gc_dropped_their_ledger_are_not_served(ens, store, client):
    ledger = new_ledger(ens, store)
    assert client.add(ledger, [make_entry(ledger, i, b"before") for i in range(10)], KEY) == Status.OK
    store.remove_ledger(ledger)
    assert wait_for(lambda: client.read(ledger, 0)[0] == Status.NO_LEDGER)
    # An add that was in flight when the ledger was deleted, arriving after the GC dropped it.
    late = client.add(ledger, [make_entry(ledger, 10, b"late")], KEY)
    assert late == Status.NO_LEDGER
    assert client.fence(ledger, KEY) == Status.NO_LEDGER
    assert client.write_lac(ledger, 10, KEY) == Status.NO_LEDGER
    for _ in range(5):  # several GC periods: nothing of the ledger comes back
        assert client.read(ledger, 10) == (Status.NO_LEDGER, [])
        assert client.read_lac(ledger)[0] == Status.NO_LEDGER
        time.sleep(GC_WAIT_MS / 1000)


def test_adds_in_flight_while_the_ledger_is_deleted_are_reclaimed_too(ens, store, client):
    ledger = new_ledger(ens, store)
    stop = threading.Event()
    sent = []  # (first entry id of the batch, status)

    def keep_adding():
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            entry_id = 0
            while not stop.is_set():
                batch = [make_entry(ledger, entry_id + i, b"x" * 100) for i in range(20)]
                try:
                    sent.append((entry_id, c.add(ledger, batch, KEY)))
                except BookieTimeout:  # refused NO_LEDGER 1 000 times in a second: shut as a flood
                    return
                entry_id += 20

    adder = threading.Thread(target=keep_adding, daemon=True)
    adder.start()
    try:
        assert wait_for(lambda: len(sent) >= 20)
        store.remove_ledger(ledger)
        assert wait_for(lambda: client.read(ledger, 0)[0] == Status.NO_LEDGER, timeout_s=15)
        dropped_at = len(sent)
        time.sleep(4 * GC_WAIT_MS / 1000)  # adds keep coming over several GC periods
    finally:
        stop.set()
        adder.join(15)
    late = sent[dropped_at:]
    assert len(late) >= 2, "no add reached the bookie after the GC dropped the ledger"
    time.sleep(2 * GC_WAIT_MS / 1000)
    for entry_id, _ in late:
        assert client.read(ledger, entry_id, 20) == (Status.NO_LEDGER, []), entry_id
    assert client.read_lac(ledger)[0] == Status.NO_LEDGER
    # Once the bookie knows the ledger is gone, it says so to the adds still coming (the first
    # late answer may be for an add committed before the GC's deletion, which took it along).
    assert {status for _, status in late[1:]} == {Status.NO_LEDGER}
    assert {status for _, status in sent} <= {Status.OK, Status.NO_LEDGER}


def test_a_dropped_ledger_does_not_come_back_when_the_journal_is_replayed(tmp_path):
    # No checkpoint but the one at start: the restart replays every record of the ledger.
    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={"gcWaitTime": 1000, "flushInterval": 600_000}) as e, \
            open_metadata(e.metadata_uri) as s:
        ledger = new_ledger(e, s)
        keeper = new_ledger(e, s)  # GC refuses to act on a listing with no ledger at all
        with RawBookieClient(e.bookies[0]) as c:
            assert c.add(ledger, [make_entry(ledger, i, b"gone") for i in range(10)], KEY) == Status.OK
            assert c.add(keeper, [make_entry(keeper, 0, b"kept")], KEY) == Status.OK
            assert c.write_lac(ledger, 9, KEY) == Status.OK
            s.remove_ledger(ledger)
            assert wait_for(lambda: c.read(ledger, 0)[0] == Status.NO_LEDGER)
        e.kill(0)
        e.start(0)
        with RawBookieClient(e.bookies[0]) as c:
            assert c.read(ledger, 0, 100) == (Status.NO_LEDGER, [])
            assert c.read_lac(ledger)[0] == Status.NO_LEDGER
            assert c.read(keeper, 0)[0] == Status.OK
        assert "replay done" in e.log(0)


# -- 9. long polls never crash the read worker ---------------------------------------------------------

def test_a_long_poll_on_a_ledger_deleted_meanwhile_is_answered_and_the_read_worker_lives(ens, store, client):
    ledger = new_ledger(ens, store)
    assert client.add(ledger, [make_entry(ledger, 0, b"tail")], KEY) == Status.OK
    read_pid = ens.worker_pid(0, "read")
    sock = client.read_sock
    sock.send_multipart([wire.pack_header(Op.READ_LAC, Flag.LONG_POLL, 77, ledger),
                         wire.LONG_POLL_BODY.pack(-1, 4000)])
    store.remove_ledger(ledger)
    got = collect(sock, [77], timeout_s=15)
    assert got.get(77, (None,))[0] == Status.NO_LEDGER
    assert client.read_lac(ledger)[0] == Status.NO_LEDGER
    assert ens.worker_pid(0, "read") == read_pid
    no_worker_died(ens)


def test_one_fencing_long_poll_on_an_unknown_ledger_does_not_kill_the_read_worker(ens, client):
    read_pid = ens.worker_pid(0, "read")
    unknown = 9_000_000_001  # not in the metadata store: the GC drops what the fence creates
    frames = [wire.pack_header(Op.READ_LAC, Flag.FENCE | Flag.LONG_POLL, 78, unknown),
              wire.LONG_POLL_BODY.pack(5, 1000), b"k"]
    assert sum(len(f) for f in frames) == 37
    client.read_sock.send_multipart(frames)
    got = collect(client.read_sock, [78], timeout_s=10)
    assert 78 in got, "the long poll was never answered"
    time.sleep(2 * GC_WAIT_MS / 1000)
    assert ens.worker_pid(0, "read") == read_pid
    assert client.read_lac(unknown)[0] == Status.NO_LEDGER
    no_worker_died(ens)
