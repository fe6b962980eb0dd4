"""Recovery with dead bookies in the last ensemble (pure protocol, simulated bookies): the
failed bookie is replaced by an ensemble change on the IN_RECOVERY metadata, the fence holds
before any re-add, reads follow the ensemble the old writer wrote to, and concurrent
recoveries that both change ensembles converge.  Without a spare bookie, Qa acks suffice and
fewer fail cleanly."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.errors import LedgerRecoveryError
from bookie.client.protocol import actions as A
from bookie.metadata import LedgerState
from bookie.client.protocol.quorum import write_set
from bookie.client.protocol.recovery import RecoveryOp
from test_protocol_model import SimCluster, new_ledger, read_all, recover

CLOSED, IN_RECOVERY = LedgerState.CLOSED, LedgerState.IN_RECOVERY


def written_ledger(shape, n_bookies, n_entries, seed):
    """A ledger whose writer wrote ``n_entries`` (all delivered) and then vanished."""
    rng = random.Random(seed)
    cluster, digest, writer = new_ledger(*shape, n_bookies, rng)
    cluster.run(writer, writer.add([b"e%d" % i for i in range(n_entries)])[1])
    cluster.deliver_until(lambda: False)
    assert writer.lac == n_entries - 1
    return cluster, digest, writer


def kill_position(cluster, position: int) -> str:
    """Kill the bookie at ``position`` of the last ensemble; its id."""
    dead = cluster.info.last_ensemble[position]
    cluster.bookies[dead].alive = False
    return dead


def start_recovery(cluster, digest):
    if cluster.info.state != IN_RECOVERY:
        assert cluster.cas(cluster.info.replace(state=IN_RECOVERY), cluster.version)
    op = RecoveryOp(cluster.info, digest.decode, version=cluster.version, rng=cluster.rng)
    cluster.run(op, op.start())
    return op


def finish(cluster, op):
    cluster.deliver_until(lambda: cluster.outputs.get(op))
    return cluster.outputs[op][-1]


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from([(2, 2, 2), (3, 2, 2), (3, 3, 3), (4, 3, 2), (5, 3, 3)]),
       victim=st.integers(0, 4), n_entries=st.integers(1, 12), seed=st.integers(0, 2**32))
def test_a_dead_bookie_of_the_last_ensemble_is_replaced_and_recovery_closes(
        shape, victim, n_entries, seed):
    e, w, a = shape
    cluster, digest, writer = written_ledger(shape, e + 1, n_entries, seed)
    dead = kill_position(cluster, victim % e)
    closed, = recover(cluster, digest)
    assert closed.state == CLOSED and closed.last_entry_id == n_entries - 1
    data = [x.data for x in read_all(cluster, digest, closed.last_entry_id)]
    assert data == [b"e%d" % i for i in range(n_entries)]
    # every entry recovery re-added is on its whole write set in the final metadata
    for entry_id in range(max(0, closed.fragments[-1][0]), n_entries):
        ensemble = closed.ensemble_for(entry_id)
        holders = [ensemble[p] for p in write_set(entry_id, e, w)]
        assert dead not in holders
        assert all(entry_id in cluster.bookies[b].entries for b in holders), entry_id


def test_the_fence_holds_before_any_re_add():
    for seed in range(40):
        cluster, digest, _ = written_ledger((3, 2, 2), 4, 6, seed)
        kill_position(cluster, seed % 3)
        op = start_recovery(cluster, digest)
        while not cluster.outputs.get(op):
            adds = [a for o, a in cluster.queue if o is op and isinstance(a, A.SendAdd)]
            assert not adds or op.fence_op.done
            cluster.deliver(cluster.rng.randrange(len(cluster.queue)))
        assert cluster.outputs[op][-1].error is None


def test_reads_follow_the_old_ensemble_after_a_change():
    """The bookie that joins holds nothing yet; asking it would end the ledger early."""
    cluster, digest, _ = written_ledger((2, 2, 2), 3, 30, 7)
    dead = kill_position(cluster, 1)
    done = finish(cluster, op := start_recovery(cluster, digest))
    assert done.error is None and done.result[0] == 29
    assert op.ensemble_changes == 1 and dead not in op.info.last_ensemble


class ListsDeadBookies(SimCluster):
    """A store whose registrations outlive their bookies (a lease not yet expired)."""

    def answer(self, a):
        if isinstance(a, A.ListBookies):
            return A.BookiesListed(sorted(self.bookies))
        return super().answer(a)


def test_a_replacement_that_is_dead_too_is_replaced_again():
    for seed in range(20):
        rng = random.Random(seed)
        cluster, digest, writer = new_ledger(2, 2, 2, 4, rng)
        cluster.__class__ = ListsDeadBookies
        cluster.run(writer, writer.add([b"x%d" % i for i in range(5)])[1])
        cluster.deliver_until(lambda: False)
        spare_dead = [b for b in cluster.bookies if b not in cluster.info.last_ensemble][0]
        cluster.bookies[spare_dead].alive = False
        cluster.bookies[cluster.info.last_ensemble[0]].alive = False
        op = start_recovery(cluster, digest)
        done = finish(cluster, op)
        assert done.error is None and done.result[0] == 4
        alive = {n for n, b in cluster.bookies.items() if b.alive}
        assert set(cluster.info.last_ensemble) <= alive


def test_concurrent_recoveries_that_both_change_ensembles_converge():
    for seed in range(60):
        cluster, digest, _ = written_ledger((3, 2, 2), 5, 8, seed)
        kill_position(cluster, seed % 3)
        a, b = recover(cluster, digest, n_readers=2)
        assert a.last_entry_id == b.last_entry_id == 7 and a.state == b.state == CLOSED
        assert [x.data for x in read_all(cluster, digest, 7)] == [b"e%d" % i for i in range(8)]


def test_without_a_spare_qa_acks_suffice():
    cluster, digest, _ = written_ledger((3, 3, 2), 3, 5, 3)
    kill_position(cluster, 2)
    closed, = recover(cluster, digest)
    assert closed.last_entry_id == 4 and len(closed.fragments) == 1


def test_without_a_spare_too_few_acks_fail_cleanly_and_name_the_bookie():
    cluster, digest, _ = written_ledger((2, 2, 2), 2, 5, 4)
    dead = kill_position(cluster, 1)
    done = finish(cluster, start_recovery(cluster, digest))
    assert isinstance(done.error, LedgerRecoveryError)
    assert dead in str(done.error) and "no spare" in str(done.error)
    assert cluster.info.state == IN_RECOVERY  # nothing closed; retry when bookies are back
    cluster.bookies[dead].alive = True
    closed, = recover(cluster, digest)
    assert closed.last_entry_id == 4


def test_a_recovery_closed_by_another_client_meanwhile_adopts_that_close():
    cluster, digest, _ = written_ledger((2, 2, 2), 3, 5, 5)
    kill_position(cluster, 0)
    op = start_recovery(cluster, digest)
    # deliver until our change is about to be written, then someone else closes the ledger
    for _ in range(1000):
        if any(isinstance(a, A.WriteMetadata) for o, a in cluster.queue if o is op):
            break
        cluster.deliver(0)
    assert cluster.cas(cluster.info.replace(state=CLOSED, last_entry_id=4, length=10),
                       cluster.version)
    done = finish(cluster, op)
    assert done.error is None and done.result == (4, 10)


def test_recovery_never_ends_below_an_entry_a_reachable_replica_holds():
    """Qw=3, Qa=2: the last entry is on one bookie only, slow to answer the fence (so asked
    last).  Two replicas saying "no entry" would be enough by the protocol, but the third is
    reachable and holds the entry: recovery keeps it."""
    cluster, digest, _ = written_ledger((3, 3, 2), 3, 6, 11)
    slow = cluster.info.last_ensemble[-1]
    for bookie in cluster.info.last_ensemble[:-1]:
        del cluster.bookies[bookie].entries[5]
    op = start_recovery(cluster, digest)

    def slow_fence(item):
        return isinstance(item[1], A.SendReadLac) and item[1].bookie == slow
    for _ in range(1000):  # answers in the order asked, the slow bookie's fence answer last
        if cluster.outputs.get(op):
            break
        order = sorted(range(len(cluster.queue)), key=lambda i: slow_fence(cluster.queue[i]))
        cluster.deliver(order[0])
    done = cluster.outputs[op][-1]
    assert done.error is None and done.result[0] == 5
    assert cluster.info.last_entry_id == 5


def test_a_good_copy_of_another_entry_is_not_taken_for_absence():
    """The replica asked first for the last acknowledged entry answers with an intact copy of
    another entry; recovery asks the next replica instead of ending the ledger before it."""
    cluster, digest, _ = written_ledger((3, 2, 2), 3, 6, 12)
    first = cluster.info.last_ensemble[write_set(5, 3, 2)[0]]
    held = cluster.bookies[first].entries
    held[5] = held[min(held)]  # the bookie returns an earlier entry's bytes for entry 5
    op = start_recovery(cluster, digest)
    for _ in range(1000):  # newest first: that bookie answers the fence early, is asked first
        if cluster.outputs.get(op):
            break
        cluster.deliver(len(cluster.queue) - 1)
    done = cluster.outputs[op][-1]
    assert done.error is None and done.result[0] == 5
    assert [x.data for x in read_all(cluster, digest, 5)] == [b"e%d" % i for i in range(6)]


class RecordsAdds(SimCluster):
    """Remembers which bookies were sent an add."""

    def answer(self, a):
        if isinstance(a, A.SendAdd):
            self.added_to = getattr(self, "added_to", set()) | {a.bookie}
        return super().answer(a)


def test_an_avoided_bookie_is_read_from_but_never_re_added_to():
    """A decommissioned bookie still runs, read-only: the recovery of an open ledger that
    names it reads its entries (here the only copy left) and re-adds them elsewhere only;
    an add to it would be refused READ_ONLY (issue 32: seed 32's incident)."""
    for seed in range(20):
        cluster, digest, _ = written_ledger((2, 2, 2), 4, 8, seed)
        cluster.__class__ = RecordsAdds
        avoided, dead = cluster.info.last_ensemble
        cluster.bookies[dead].alive = False
        assert cluster.cas(cluster.info.replace(state=IN_RECOVERY), cluster.version)
        op = RecoveryOp(cluster.info, digest.decode, version=cluster.version, rng=cluster.rng,
                        avoid={avoided})
        cluster.run(op, op.start())
        done = finish(cluster, op)
        assert done.error is None and done.result[0] == 7
        assert avoided not in cluster.added_to
        assert avoided not in cluster.info.last_ensemble and dead not in cluster.info.last_ensemble
        data = [x.data for x in read_all(cluster, digest, 7)]
        assert data == [b"e%d" % i for i in range(8)]
