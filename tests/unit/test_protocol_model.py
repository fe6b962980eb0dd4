"""A simulated cluster driving the pure protocol core: writer, ensemble changes, fencing,
recovery (with its own ensemble changes) and reads, with every message delivered in an order
hypothesis chooses.

The simulated bookies follow the wire protocol's rules (fenced ledgers refuse normal adds,
a fence is kept even where no entry is held, reads return held entries from the first one
asked for).  The rule-based model checks, whatever the interleaving: every confirmed entry is
in the recovered ledger and reads back identical, confirmations come in entry order, and all
readers agree on the last entry - and, since a spare bookie always exists (Qa + E bookies,
at most Qa - 1 killed), recovery always succeeds, replacing dead bookies as it re-replicates.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bookie.client.digest import DigestManager
from bookie.client.errors import LedgerFencedError, NotEnoughBookiesError
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.reader import Deliver, ReadOp
from bookie.client.protocol.recovery import RecoveryOp
from bookie.client.protocol.writer import LedgerWriter
from bookie.wire import Status, unpack_entry_header

LEDGER = 7
CLOSED, IN_RECOVERY = LedgerState.CLOSED, LedgerState.IN_RECOVERY


class SimBookie:
    def __init__(self):
        self.entries: dict[int, bytes] = {}
        self.fenced = False
        self.lac = -1
        self.alive = True
        self.durable: set[int] = set()  # entries a FORCE_LEDGER made durable here


class SimCluster:
    """Bookies, a CAS metadata record and a queue of undelivered requests."""

    def __init__(self, names, info: LedgerInfo, rng: random.Random):
        self.bookies = {n: SimBookie() for n in names}
        self.info, self.version = info, 0
        self.queue: list = []  # (op, request action)
        self.outputs: dict = {}  # op -> non-request actions it emitted
        self.rng = rng

    def run(self, op, actions):
        for a in actions:
            if isinstance(a, (A.SendAdd, A.SendRead, A.SendReadLac, A.SendWriteLac,
                              A.SendForce, A.ListBookies, A.WriteMetadata)):
                self.queue.append((op, a))
            else:
                self.outputs.setdefault(op, []).append(a)

    def deliver(self, index: int):
        op, a = self.queue.pop(index % len(self.queue))
        self.run(op, op.handle(self.answer(a)))

    def deliver_until(self, done, limit=100_000):
        for _ in range(limit):
            if done() or not self.queue:
                return
            self.deliver(self.rng.randrange(len(self.queue)))
        raise AssertionError("simulation did not settle")

    def cas(self, info, version):
        if version != self.version:
            return False
        self.info, self.version = info, self.version + 1
        return True

    def answer(self, a):
        if isinstance(a, A.ListBookies):
            return A.BookiesListed([n for n, b in self.bookies.items() if b.alive])
        if isinstance(a, A.WriteMetadata):
            if self.cas(a.info, a.version):
                return A.MetadataWritten(a, self.version)
            return A.MetadataConflict(a, self.info, self.version)
        bookie = self.bookies[a.bookie]
        if isinstance(a, A.SendAdd):
            if not bookie.alive:
                return A.AddResponse(a, A.TIMEOUT)
            if bookie.fenced and not a.recovery:
                return A.AddResponse(a, Status.FENCED)
            for raw in a.entries:
                _, entry_id, lac, _ = unpack_entry_header(raw)
                bookie.entries[entry_id] = raw
                bookie.lac = max(bookie.lac, lac)
            return A.AddResponse(a, Status.OK)
        if isinstance(a, A.SendReadLac):
            if not bookie.alive:
                return A.LacResponse(a, A.TIMEOUT)
            if a.fence:
                bookie.fenced = True
            return A.LacResponse(a, Status.OK, bookie.lac, max(bookie.entries, default=-1))
        if isinstance(a, A.SendWriteLac):
            bookie.lac = max(bookie.lac, a.lac)
            return A.WriteLacResponse(a, Status.OK)
        if isinstance(a, A.SendForce):
            if not bookie.alive:
                return A.ForceResponse(a, A.TIMEOUT)
            bookie.durable.update(bookie.entries)
            return A.ForceResponse(a, Status.OK)
        if isinstance(a, A.SendRead):
            if not bookie.alive:
                return A.ReadResponse(a, A.TIMEOUT)
            if a.first_entry_id not in bookie.entries:
                return A.ReadResponse(a, Status.NO_ENTRY)
            got = [bookie.entries[e] for e in range(a.first_entry_id, a.first_entry_id +
                                                    a.max_count * a.stride, a.stride)
                   if e in bookie.entries]
            return A.ReadResponse(a, Status.OK, got)
        raise AssertionError(a)


def recover(cluster: SimCluster, digest: DigestManager, n_readers: int = 1):
    """Open-with-recovery for ``n_readers`` concurrent readers; returns each one's closed info.

    Each reader is one RecoveryOp started on the metadata as read: it marks the ledger
    IN_RECOVERY, fences, re-replicates and closes it, every metadata write a CAS it emits
    itself.  Recovery replaces bookies whose re-add fails, so with a writable bookie outside
    the ensemble it must succeed even while bookies of the ensemble are dead."""
    ops = []
    for _ in range(n_readers):
        op = RecoveryOp(cluster.info, digest.decode, version=cluster.version, rng=cluster.rng)
        ops.append(op)
        cluster.run(op, op.start())
    cluster.deliver_until(lambda: all(cluster.outputs.get(op) for op in ops))
    results = []
    for op in ops:
        finished = cluster.outputs[op][-1]
        assert finished.error is None, finished.error
        assert op.info.state == CLOSED and cluster.info.state == CLOSED
        assert finished.result == (op.info.last_entry_id, op.info.length)
        results.append(op.info)
    return results


def read_all(cluster: SimCluster, digest: DigestManager, last: int):
    if last < 0:
        return []
    op = ReadOp(cluster.info, 0, last, digest.decode, max_count=3)
    cluster.run(op, op.start())
    cluster.deliver_until(lambda: op.done)
    out = cluster.outputs.get(op, [])
    assert isinstance(out[-1], A.Finished) and out[-1].error is None, out[-1]
    return [e for d in out if isinstance(d, Deliver) for e in d.entries]


def new_ledger(e, w, a, n_bookies, rng):
    names = [f"b{i}:3181" for i in range(n_bookies)]
    info = LedgerInfo(LEDGER, e, w, a, fragments=((0, tuple(names[:e])),))
    cluster = SimCluster(names, info, rng)
    digest = DigestManager(LEDGER, "crc32c", b"pw")
    writer = LedgerWriter(info, 0, digest.encode, rng=rng)
    return cluster, digest, writer


# ---- scenarios ---------------------------------------------------------------------------------

def confirms(cluster, op):
    return [a for a in cluster.outputs.get(op, []) if isinstance(a, A.Confirm)]


def test_adds_confirm_and_close_records_last_entry():
    rng = random.Random(1)
    cluster, digest, writer = new_ledger(3, 2, 2, 3, rng)
    for i in range(10):
        cluster.run(writer, writer.add([b"p%d" % i])[1])
    cluster.deliver_until(lambda: False)
    assert writer.lac == 9
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: False)
    assert cluster.info.state == CLOSED and cluster.info.last_entry_id == 9
    assert cluster.info.length == sum(len(b"p%d" % i) for i in range(10))
    assert [e.data for e in read_all(cluster, digest, 9)] == [b"p%d" % i for i in range(10)]
    try:
        writer.add([b"late"])
    except Exception as exc:  # noqa: BLE001 - checking the class below
        assert type(exc).__name__ == "LedgerClosedError"
    else:
        raise AssertionError("add after close succeeded")


def test_bookie_failure_changes_ensemble_and_resends_unconfirmed():
    rng = random.Random(2)
    cluster, digest, writer = new_ledger(3, 3, 2, 5, rng)
    cluster.run(writer, writer.add([b"a", b"b"])[1])
    cluster.deliver_until(lambda: False)
    cluster.bookies["b1:3181"].alive = False
    cluster.run(writer, writer.add([b"c", b"d"])[1])
    cluster.deliver_until(lambda: False)
    assert writer.lac == 3
    assert len(cluster.info.fragments) == 2 and cluster.info.fragments[1][0] == 2
    new = cluster.info.fragments[1][1]
    assert "b1:3181" not in new and len(set(new)) == 3
    # entries of the new fragment are on Qa bookies of its ensemble (the replacement got
    # those still unconfirmed when it joined)
    for e in (2, 3):
        assert sum(e in cluster.bookies[b].entries for b in new) >= 2
    assert [x.data for x in read_all(cluster, digest, 3)] == [b"a", b"b", b"c", b"d"]


def test_not_enough_bookies_fails_pending_adds_with_actionable_message():
    rng = random.Random(3)
    cluster, digest, writer = new_ledger(3, 3, 3, 3, rng)
    cluster.bookies["b2:3181"].alive = False
    cluster.run(writer, writer.add([b"x"])[1])
    cluster.deliver_until(lambda: False)
    fails = [a for a in cluster.outputs[writer] if isinstance(a, A.FailAdds)]
    assert fails and isinstance(fails[0].error, NotEnoughBookiesError)
    assert "start more bookies" in str(fails[0].error)


def test_fencing_fails_the_old_writer_and_recovery_keeps_every_confirmed_entry():
    rng = random.Random(4)
    cluster, digest, writer = new_ledger(3, 2, 2, 3, rng)
    cluster.run(writer, writer.add([b"e%d" % i for i in range(5)])[1])
    cluster.deliver_until(lambda: False)
    cluster.run(writer, writer.add([b"late%d" % i for i in range(3)])[1])  # not delivered yet
    closed, = recover(cluster, digest)
    assert closed.last_entry_id >= 4
    data = [e.data for e in read_all(cluster, digest, closed.last_entry_id)]
    assert data[:5] == [b"e%d" % i for i in range(5)]
    cluster.deliver_until(lambda: False)
    fails = [a for a in cluster.outputs[writer] if isinstance(a, A.FailAdds)]
    assert fails == [] or isinstance(fails[0].error, LedgerFencedError)
    assert writer.lac <= closed.last_entry_id


def test_two_concurrent_recoveries_converge_on_the_same_last_entry():
    for seed in range(30):
        rng = random.Random(seed)
        cluster, digest, writer = new_ledger(3, 3, 2, 3, rng)
        cluster.run(writer, writer.add([b"e%d" % i for i in range(6)])[1])
        for _ in range(rng.randrange(0, 12)):  # partially delivered
            if cluster.queue:
                cluster.deliver(rng.randrange(len(cluster.queue)))
        acked = writer.lac
        a, b = recover(cluster, digest, n_readers=2)
        assert a.last_entry_id == b.last_entry_id >= acked
        assert a.state == b.state == CLOSED


def test_read_falls_back_to_next_replica_on_missing_or_corrupt_entry():
    rng = random.Random(5)
    cluster, digest, writer = new_ledger(3, 3, 2, 3, rng)
    cluster.run(writer, writer.add([b"v%d" % i for i in range(6)])[1])
    cluster.deliver_until(lambda: False)
    cluster.bookies["b0:3181"].entries.pop(0)  # missing on the first replica of entry 0
    raw = bytearray(cluster.bookies["b1:3181"].entries[1])
    raw[-1] ^= 0xFF  # corrupt on the first replica of entry 1
    cluster.bookies["b1:3181"].entries[1] = bytes(raw)
    cluster.bookies["b2:3181"].alive = False  # first replica of entry 2 is down
    assert [e.data for e in read_all(cluster, digest, 5)] == [b"v%d" % i for i in range(6)]


def test_read_reports_digest_mismatch_naming_the_entry_when_every_replica_is_bad():
    rng = random.Random(6)
    cluster, digest, writer = new_ledger(2, 2, 2, 2, rng)
    cluster.run(writer, writer.add([b"a", b"b"])[1])
    cluster.deliver_until(lambda: False)
    for b in cluster.bookies.values():
        raw = bytearray(b.entries[1])
        raw[-1] ^= 1
        b.entries[1] = bytes(raw)
    op = ReadOp(cluster.info, 0, 1, digest.decode)
    cluster.run(op, op.start())
    cluster.deliver_until(lambda: op.done)
    err = cluster.outputs[op][-1].error
    assert type(err).__name__ == "DigestMismatchError" and "entry 1" in str(err)


# ---- rule-based model --------------------------------------------------------------------------

class LedgerModel(RuleBasedStateMachine):
    """Add / deliver / kill bookies / close / recover, in any order; check what readers see."""

    def __init__(self):
        super().__init__()
        self.cluster = None

    @precondition(lambda self: self.cluster is None)
    @rule(shape=st.sampled_from([(1, 1, 1), (2, 2, 1), (2, 2, 2), (3, 2, 2), (3, 3, 2),
                                 (4, 3, 2), (5, 3, 3)]),
          seed=st.integers(0, 2**32))
    def create(self, shape, seed):
        e, w, a = shape
        self.rng = random.Random(seed)
        self.cluster, self.digest, self.writer = new_ledger(e, w, a, e + a, self.rng)
        self.payloads: dict[int, bytes] = {}
        self.kills_left = a - 1
        self.closed_at = None

    @precondition(lambda self: self.cluster is not None)
    @rule(n=st.integers(1, 5))
    def add(self, n):
        if self.writer.state != "writing":
            return
        batch = [self.rng.randbytes(self.rng.randrange(0, 20)) for _ in range(n)]
        first, actions = self.writer.add(batch)
        for i, p in enumerate(batch):
            self.payloads[first + i] = p
        self.cluster.run(self.writer, actions)

    @precondition(lambda self: self.cluster is not None and self.cluster.queue)
    @rule(k=st.integers(0, 1000), times=st.integers(1, 8))
    def deliver(self, k, times):
        for i in range(times):
            if self.cluster.queue:
                self.cluster.deliver(k + i)

    @precondition(lambda self: self.cluster is not None and self.kills_left > 0)
    @rule(k=st.integers(0, 100))
    def kill_bookie(self, k):
        alive = [n for n, b in self.cluster.bookies.items() if b.alive]
        self.cluster.bookies[alive[k % len(alive)]].alive = False
        self.kills_left -= 1

    @precondition(lambda self: self.cluster is not None)
    @rule()
    def close_writer(self):
        self.cluster.run(self.writer, self.writer.close())

    @precondition(lambda self: self.cluster is not None)
    @rule(readers=st.integers(1, 2))
    def recover_and_read(self, readers):
        confirmed = self.writer.lac
        results = recover(self.cluster, self.digest, readers)
        lasts = {r.last_entry_id for r in results}
        assert len(lasts) == 1, f"readers disagree on the last entry: {lasts}"
        last = lasts.pop()
        if self.closed_at is not None:
            assert last == self.closed_at
        self.closed_at = last
        assert last >= confirmed, f"confirmed entry {confirmed} lost (closed at {last})"
        entries = read_all(self.cluster, self.digest, last)
        assert [e.entry_id for e in entries] == list(range(last + 1))
        for e in entries:
            assert e.data == self.payloads[e.entry_id]

    @invariant()
    def confirmations_in_order(self):
        if self.cluster is None:
            return
        expect = 0
        for a in self.cluster.outputs.get(self.writer, []):
            if isinstance(a, (A.Confirm, A.FailAdds)):
                assert a.first == expect or isinstance(a, A.FailAdds)
                expect = a.last + 1
        assert self.writer.lac < self.writer.pending.next_entry_id

    @invariant()
    def writer_never_confirms_past_a_close(self):
        if self.cluster is not None and self.closed_at is not None:
            assert self.writer.lac <= self.closed_at


TestLedgerModel = LedgerModel.TestCase
TestLedgerModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
