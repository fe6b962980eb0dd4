"""A corrupt replica is skipped, against real bookies.

One replica's copy of an entry is corrupted on disk (a byte of its header flipped in the
bookie's entry log): reads still return every entry intact, from the other replicas.  Then a
bookie is stopped and its read port served by a raw ZeroMQ ROUTER that forges bad answers
(or none): the reader asks it once, never again, and a read whose caller gave up sends
nothing more.  The forger holds the stopped bookie's own key and registration (a bookie gone
bad, not an impostor: a server without the key is never asked anything, issue 30).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import zmq
import zmq.auth

from bookie import wire
from bookie.client import BKTimeoutError, BookKeeper
from bookie.metadata import NodeExistsError, open_metadata
from bookie.storage.layout import KEY_FILE, PUBLIC_KEY_FIELD, current_dir
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Op, Status

PW = b"pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 20.0}
N_ENTRIES = 30


@pytest.fixture(scope="module")
def ensemble():
    with LocalBookies(3) as ens:
        yield ens


@pytest.fixture(scope="module")
def written(ensemble):
    """A closed ledger of N_ENTRIES on all three bookies (E=3, Qw=3, Qa=2):
    (ledger id, ensemble, payloads)."""
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        lh = bk.create_ledger(3, 3, 2, digest="crc32c", password=PW)
        payloads = [b"entry-%02d-" % i + os.urandom(40) for i in range(N_ENTRIES)]
        lh.add_range_async(payloads).result(30)
        lh.close()
        return lh.ledger_id, lh.metadata.last_ensemble, payloads


def flip(raw: bytes, offset: int, mask: int) -> bytes:
    out = bytearray(raw)
    out[offset] ^= mask
    return bytes(out)


def stored_copy(bookie: str, ledger_id: int, entry_id: int) -> bytes:
    # Qa=2 of Qw=3: the close may come before the third bookie has stored its copies (its first
    # request for a ledger waits for the owner's key check, slow on purpose), so wait for them.
    deadline = time.monotonic() + 30
    with RawBookieClient(bookie, timeout_s=10) as raw:
        while True:
            status, entries = raw.read(ledger_id, entry_id)
            if status == Status.OK or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert status == Status.OK and entries, status
    return entries[0]


def corrupt_on_disk(ens: LocalBookies, i: int, copy: bytes, offset: int, mask: int) -> None:
    """Flip one byte of ``copy`` where bookie i's entry logs hold it (found by its bytes)."""
    hits = []
    for root, _, files in os.walk(os.path.join(ens.bookie_dir(i), "ledgers")):
        for name in files:
            if name.endswith(".log"):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    data = f.read()
                at = data.find(copy)
                while at >= 0:
                    hits.append((path, at))
                    at = data.find(copy, at + 1)
    assert len(hits) == 1, f"expected the entry once in bookie {i}'s entry logs: {hits}"
    path, at = hits[0]
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, at + offset)
        os.pwrite(fd, bytes([old[0] ^ mask]), at + offset)
    finally:
        os.close(fd)


class ForgedBookie:
    """A raw ROUTER on a stopped bookie's read port: records every request as (op, first
    entry id, time) and answers READs with ``answer(first_entry_id)`` - a list of entry bytes
    - or not at all when that is None."""

    def __init__(self, bookie_id: str, answer, ens):
        host, port = bookie_id.rsplit(":", 1)
        self.answer = answer
        self.requests: list[tuple[int, int | None, float]] = []
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        i = ens.bookies.index(bookie_id)  # the bookie's own keypair, as it proves it
        public, secret = zmq.auth.load_certificate(
            os.path.join(current_dir(ens.journal_dirs(i)[0]), KEY_FILE))
        self._sock.curve_server = 1
        self._sock.curve_secretkey = secret
        self._sock.bind(f"tcp://{host}:{int(port) + 1}")
        # and its registration, once the killed bookie's lease ran out
        self._store = open_metadata(ens.metadata_uri, lease_ms=2000)
        info = {"host": host, "add_port": int(port), "read_port": int(port) + 1,
                PUBLIC_KEY_FIELD: public.decode()}
        deadline = time.monotonic() + 30
        while True:
            try:
                self._registration = self._store.register_bookie(bookie_id, info=info)
                break
            except NodeExistsError:
                assert time.monotonic() < deadline, "the killed bookie's lease never ran out"
                time.sleep(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def reads(self) -> list[int]:
        return [first for op, first, _ in self.requests if op == Op.READ]

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(50):
                continue
            ident, head, *body = self._sock.recv_multipart()
            op, _, rid, ledger_id = wire.unpack_header(head)
            first = wire.READ_BODY.unpack(body[0])[0] if op == Op.READ else None
            self.requests.append((op, first, time.monotonic()))
            entries = self.answer(first) if op == Op.READ else None
            if entries is None:
                continue
            lengths, data = wire.pack_batch(entries)
            self._sock.send_multipart([ident, wire.pack_header(op, Status.OK, rid, ledger_id),
                                       lengths, data])

    def close(self) -> None:
        self._registration.close()
        self._store.close()
        self._stop.set()
        self._thread.join(5)
        self._sock.close(0)
        self._ctx.term()


def test_a_copy_corrupted_on_disk_is_read_from_another_replica(ensemble, written):
    ledger_id, ens, payloads = written
    entry_id = 7
    first_replica = ens[entry_id % 3]  # where a read of the entry starts
    copy = stored_copy(first_replica, ledger_id, entry_id)
    # the low byte of the header's entry id: the copy now claims entry 7 ^ 0x40 = 71, and its
    # digest no longer matches
    corrupt_on_disk(ensemble, ensemble.bookies.index(first_replica), copy, 15, 0x40)
    assert stored_copy(first_replica, ledger_id, entry_id) == flip(copy, 15, 0x40)
    with BookKeeper(ensemble.metadata_uri, dict(CONFIG, operationTimeout=10.0)) as bk:
        rh = bk.open_ledger(ledger_id, digest="crc32c", password=PW)
        assert rh.read_entry(entry_id).data == payloads[entry_id]
        assert [e.data for e in rh.read_entries(0, N_ENTRIES - 1)] == payloads


def test_a_bookie_forging_bad_copies_is_asked_once_then_never_again(ensemble, written):
    ledger_id, ens, payloads = written
    entry_id = 11
    forger = ens[entry_id % 3]
    i = ensemble.bookies.index(forger)
    copies = {e: stored_copy(forger, ledger_id, e) for e in range(N_ENTRIES)}
    ensemble.kill(i)
    fake = ForgedBookie(forger, lambda first: [flip(copies[first], 15, 0x40)], ensemble)
    try:
        with BookKeeper(ensemble.metadata_uri, dict(CONFIG, operationTimeout=10.0)) as bk:
            rh = bk.open_ledger(ledger_id, digest="crc32c", password=PW, recovery=False)
            assert rh.read_entry(entry_id).data == payloads[entry_id]
            time.sleep(1.0)  # anything the reader would still send arrives meanwhile
            assert fake.reads() == [entry_id]
    finally:
        fake.close()
        ensemble.start(i)


def test_a_read_whose_caller_gave_up_sends_nothing_more(ensemble, written):
    ledger_id, ens, payloads = written
    entry_id = 12
    silent = [ens[entry_id % 3], ens[(entry_id + 1) % 3]]  # the entry's first two replicas
    index = [ensemble.bookies.index(b) for b in silent]
    for i in index:
        ensemble.kill(i)
    fakes = [ForgedBookie(b, lambda first: None, ensemble) for b in silent]  # they never answer
    try:
        # no speculative read: only the read timeout (after the caller gave up) could move
        # the read on to the second replica
        # (a read timeout three times the caller's, and a wait 1.5 s past it: 4.5 s, not the
        # 7 s of a 5 s read timeout)
        config = dict(CONFIG, readTimeout=3.0, operationTimeout=1.0, speculativeReadTimeout=0)
        with BookKeeper(ensemble.metadata_uri, config) as bk:
            rh = bk.open_ledger(ledger_id, digest="crc32c", password=PW, recovery=False)
            started = time.monotonic()
            with pytest.raises(BKTimeoutError):
                rh.read_entry(entry_id)
            # had the read gone on, the first replica's timeout (3 s) would have moved it to
            # the second replica by now
            time.sleep(max(0.0, started + 4.5 - time.monotonic()))
            assert fakes[0].reads() in ([], [entry_id])  # [] only if the caller gave up first
            assert fakes[1].reads() == []
    finally:
        for fake in fakes:
            fake.close()
        for i in index:
            ensemble.start(i)
