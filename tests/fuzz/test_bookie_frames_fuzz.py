"""Frame fuzzing of a live bookie: malformed and unlucky requests on both sockets.

A seeded generator builds messages from the shapes of the wire protocol (every op, flag
combination, frame count) and mutates them (a flipped byte, a cut or grown frame, a frame
dropped, doubled or inserted, the other socket).  Ledger ids come from a small pool so that
requests meet: a ledger with stored entries under a key the fuzzer never uses, ledgers that
fuzzed adds and fences create and the GC (running every 200 ms) drops again, ids at the edges
of the range.  Long polls, fences and deletions race as they would with many clients.

Whatever arrives, the bookie must end with:
- no worker restarted and no request that escaped every check ("request failed" in the log);
- every stored entry, and the protected ledger's LAC, unchanged;
- every well-formed request answered: a probe client checks reads, adds and a refused fence
  every ``PROBE_EVERY`` frames, each within its timeout.

The default suite sends 20,000 frames; ``-m soak`` sends ``BOOKIE_FUZZ_FRAMES`` (default 10^6).
"""

from __future__ import annotations

import os
import random
import time

import pytest
import zmq

from bookie import wire
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from zsockets import pin
from bookie.wire import Flag, Op, Status

ROLES = ("journal", "add", "read", "gc")
PROBE_EVERY = 2_000
MAX_ENTRY_BYTES = 65536


class MessageFuzzer:
    """Messages for a bookie's add (0) and read (1) sockets, reproducible from a seed."""

    def __init__(self, seed: int, ledger_ids: list[int]):
        self.rnd = random.Random(seed)
        self.ledger_ids = ledger_ids + [0, 1, 2, 3, wire.MAX_ID, 2**40 + 7]
        self.keys = [b"", b"k", b"fuzz-key", b"x" * 64, b"y" * 65]
        self.rid = 0
        shapes = [(self.junk, 8), (self.header_junk, 8), (self.add, 25), (self.read, 15),
                  (self.read_lac, 20), (self.write_lac, 10), (self.info, 2)]
        self.shapes = [s for s, _ in shapes]
        self.weights = [w for _, w in shapes]

    # -- pieces ------------------------------------------------------------------------------------
    def ledger(self) -> int:
        r = self.rnd
        return r.choice(self.ledger_ids) if r.random() < 0.9 else r.randrange(2**63)

    def key(self) -> bytes:
        r = self.rnd
        return r.choice(self.keys) if r.random() < 0.8 else r.randbytes(r.randrange(0, 70))

    def header(self, op: int, flags: int, ledger_id: int) -> bytes:
        self.rid += 1
        return wire.pack_header(op, flags, self.rid, ledger_id)

    # -- shapes ------------------------------------------------------------------------------------
    def junk(self):
        r = self.rnd
        return r.randrange(2), [r.randbytes(r.randrange(0, 40)) for _ in range(r.randrange(0, 7))]

    def header_junk(self):
        r = self.rnd
        head = wire.HEADER.pack(r.choice([b"BK", b"BK", b"BK", b"KB"]), r.choice([1, 1, 1, 0, 2]),
                                r.randrange(0, 9), r.choice([0, 1, 2, 4, 6, r.randrange(2**16)]), 0,
                                r.randrange(2**64), r.choice([self.ledger(), -r.randrange(1, 2**63)]))
        return r.randrange(2), [head] + [r.randbytes(r.randrange(0, 30)) for _ in range(r.randrange(0, 5))]

    def add(self):
        r = self.rnd
        lid = self.ledger()
        entries = []
        for _ in range(r.choice([1, 1, 2, 5])):
            owner = lid if r.random() < 0.9 else self.ledger()
            entry_id = r.choice([r.randrange(100), r.randrange(2**63), -r.randrange(1, 100)])
            entries.append(wire.pack_entry(owner, entry_id, r.randrange(-1, 100), 0, b"\0" * 8,
                                           r.randbytes(r.choice([0, 10, 100, 1000]))))
        lengths, data = wire.pack_batch(entries)
        if r.random() < 0.1:
            lengths = r.randbytes(r.choice([0, 3, 4, 8]))
        flags = Flag.RECOVERY_ADD if r.random() < 0.3 else 0
        return 0, [self.header(Op.ADD, flags, lid), self.key(), lengths, data]

    def read(self):
        r = self.rnd
        lid = self.ledger()
        first = r.choice([0, r.randrange(100), r.randrange(2**64)])
        count = r.choice([0, 1, 10, 1000, 2**32 - 1])
        frames = [self.header(Op.READ, 0, lid), wire.READ_BODY.pack(first, count)]
        if r.random() < 0.3:
            frames[0] = self.header(Op.READ, Flag.FENCE, lid)
            frames.append(self.key())
        return 1, frames

    def read_lac(self):
        r = self.rnd
        lid = self.ledger()
        flags = r.choice([0, Flag.FENCE, Flag.LONG_POLL, Flag.FENCE | Flag.LONG_POLL])
        frames = [self.header(Op.READ_LAC, flags, lid)]
        if flags & Flag.LONG_POLL:
            timeout_ms = r.choice([0, 1, 50, 300, 1000, 3000, 2**32 - 1])
            frames.append(wire.LONG_POLL_BODY.pack(r.choice([-1, 5, 2**62, -2**63]), timeout_ms))
        if flags & Flag.FENCE:
            frames.append(self.key())
        return 1, frames

    def write_lac(self):
        r = self.rnd
        lac = r.choice([-2, -1, 0, 5, 2**63 - 1, -2**63])
        return 0, [self.header(Op.WRITE_LAC, 0, self.ledger()), self.key(), wire.WRITE_LAC_BODY.pack(lac)]

    def info(self):
        return self.rnd.randrange(2), [self.header(Op.INFO, 0, 0)]

    # -- mutation ----------------------------------------------------------------------------------
    def mutate(self, sock: int, frames: list[bytes]):
        r = self.rnd
        frames = list(frames)
        how = r.randrange(7)
        i = r.randrange(len(frames)) if frames else 0
        if how == 0 and frames and frames[i]:
            b = bytearray(frames[i])
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
            frames[i] = bytes(b)
        elif how == 1 and frames:
            frames[i] = frames[i][:r.randrange(len(frames[i]) + 1)]
        elif how == 2 and frames:
            frames[i] = frames[i] + r.randbytes(r.randrange(1, 16))
        elif how == 3 and frames:
            del frames[i]
        elif how == 4 and frames:
            frames.insert(i, frames[i])
        elif how == 5:
            frames.insert(i, r.randbytes(r.randrange(0, 24)))
        else:
            sock = 1 - sock
        return sock, frames

    def message(self):
        sock, frames = self.rnd.choices(self.shapes, self.weights)[0]()
        if self.rnd.random() < 0.5:
            sock, frames = self.mutate(sock, frames)
        return sock, frames


class Guarded:
    """The ledgers whose contents the fuzzer must never change, and a probe of the bookie."""

    def __init__(self, ens, store):
        self.ens = ens
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        self.key = os.urandom(32)  # never among the fuzzer's keys
        self.ledger, _ = store.create_ledger(meta)
        self.probe_ledger, _ = store.create_ledger(meta)
        self.entries = [make_entry(self.ledger, i, os.urandom(200), lac=i - 1) for i in range(50)]
        self.probe_entries = [make_entry(self.probe_ledger, 0, b"probe 0")]
        with RawBookieClient(ens.bookies[0]) as c:
            assert c.add(self.ledger, self.entries, self.key) == Status.OK
            assert c.add(self.probe_ledger, self.probe_entries, self.key) == Status.OK
            assert c.write_lac(self.ledger, 49, self.key) == Status.OK
            self.lac = c.read_lac(self.ledger)
        assert self.lac == (Status.OK, 49, 49)
        self.probes = 0

    def probe(self) -> None:
        """Well-formed requests, each answered within its timeout (BookieTimeout otherwise)."""
        with RawBookieClient(self.ens.bookies[0], timeout_s=15) as c:
            n = len(self.probe_entries)
            entry = make_entry(self.probe_ledger, n, b"probe %d" % n, lac=n - 1)
            assert c.add(self.probe_ledger, [entry], self.key) == Status.OK
            self.probe_entries.append(entry)
            assert c.read(self.probe_ledger, n) == (Status.OK, [entry])
            assert c.read(self.ledger, 0, 50) == (Status.OK, self.entries)
            assert c.read_lac(self.ledger) == self.lac
            assert c.fence(self.ledger, b"not-the-key") == Status.UNAUTHORIZED
            assert c.info()["writable"] is True
        self.probes += 1

    def check_unchanged(self) -> None:
        with RawBookieClient(self.ens.bookies[0], timeout_s=15) as c:
            assert c.read(self.ledger, 0, 1000) == (Status.OK, self.entries)
            assert c.read_lac(self.ledger) == self.lac
            assert c.read(self.probe_ledger, 0, 10**6) == (Status.OK, self.probe_entries)
            assert c.add(self.ledger, [make_entry(self.ledger, 50, b"still writable")], self.key) == Status.OK


def run_fuzz(ens, n_frames: int, seed: int) -> dict:
    """Send ``n_frames`` fuzzed messages with probes in between; returns the run's figures."""
    with open_metadata(ens.metadata_uri) as store:
        guarded = Guarded(ens, store)
        fuzzer = MessageFuzzer(seed, [guarded.ledger, guarded.probe_ledger])
        pids = {role: ens.worker_pid(0, role) for role in ROLES}
        ctx = zmq.Context()
        socks = []
        for offset in (0, 1):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDTIMEO, 30_000)  # a bookie that stops reading fails the run
            _, port = pin(s, ens.bookies[0])
            p = port + offset
            s.connect(f"tcp://127.0.0.1:{p}")
            socks.append(s)
        answers = 0
        t0 = time.monotonic()
        try:
            for n in range(1, n_frames + 1):
                which, frames = fuzzer.message()
                if frames:
                    socks[which].send_multipart(frames)
                if n % 64 == 0:
                    for s in socks:
                        while s.poll(0):
                            s.recv_multipart()
                            answers += 1
                if n % PROBE_EVERY == 0:
                    guarded.probe()
            elapsed_s = time.monotonic() - t0
            guarded.probe()
            guarded.check_unchanged()
        finally:
            for s in socks:
                s.close()
            ctx.term()
        log = ens.log(0)
        restarts = log.count("worker died")
        assert restarts == 0, log[-4000:]
        assert {role: ens.worker_pid(0, role) for role in ROLES} == pids
        assert "request failed" not in log and "Traceback" not in log, log[-4000:]
        return {"frames": n_frames, "seconds": round(elapsed_s, 1),
                "frames_per_s": round(n_frames / elapsed_s), "answers_drained": answers,
                "probes": guarded.probes, "worker_restarts": restarts}


@pytest.fixture
def ens(tmp_path):
    conf = {"gcWaitTime": 200, "flushInterval": 200, "nettyMaxFrameSizeBytes": MAX_ENTRY_BYTES}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as e:
        yield e


def test_twenty_thousand_fuzzed_frames_change_nothing_and_crash_nothing(ens):
    figures = run_fuzz(ens, 20_000, seed=20_000)
    print("fuzz:", figures)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_a_million_fuzzed_frames_change_nothing_and_crash_nothing(ens):
    n_frames = int(os.environ.get("BOOKIE_FUZZ_FRAMES", 1_000_000))
    figures = run_fuzz(ens, n_frames, seed=int(os.environ.get("BOOKIE_FUZZ_SEED", 1)))
    print("fuzz:", figures)
