"""A recovery that failed half way, then another: no acknowledged entry is lost (pure protocol,
simulated bookies).

E=3, Qw=2, Qa=2 on four bookies.  The writer's entries are acknowledged; the writer dies.
Recovery A fences, finds that one bookie stops answering its recovery adds, replaces it with
the spare bookie - and dies before the spare got anything.  Recovery B must still read the old
writer's entries from the bookies the writer wrote them to, never from A's replacement, and
close the ledger at the last acknowledged entry or later.  The same holds when B runs while A is
stuck (concurrent recoveries, one of them changing the ensemble).
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.protocol import actions as A
from bookie.metadata import LedgerState
from bookie.client.protocol.recovery import RecoveryOp
from test_protocol_model import new_ledger, read_all

N_ENTRIES = 6  # entry 5 carries LAC 4, so recovery reads entry 5 forward


def acknowledged_then_writer_gone(shape, n_entries, seed):
    """A ledger whose writer added ``n_entries`` one at a time (each acknowledged before the
    next, so the bookies' LAC lags the last one) and then vanished."""
    rng = random.Random(seed)
    cluster, digest, writer = new_ledger(*shape, shape[0] + 1, rng)
    for i in range(n_entries):
        cluster.run(writer, writer.add([b"e%d" % i])[1])
        cluster.deliver_until(lambda: False)
    assert writer.lac == n_entries - 1
    return cluster, digest


def start(cluster, digest) -> RecoveryOp:
    """A recovery of the ledger as it is now (marked IN_RECOVERY first, as opening does)."""
    if cluster.info.state != LedgerState.IN_RECOVERY:
        assert cluster.cas(cluster.info.replace(state=LedgerState.IN_RECOVERY), cluster.version)
    op = RecoveryOp(cluster.info, digest.decode, version=cluster.version, rng=cluster.rng)
    cluster.run(op, op.start())
    return op


def requests_of(cluster, op) -> list:
    return [a for o, a in cluster.queue if o is op]


def run_until_it_feeds(cluster, op, spare: str) -> None:
    """Deliver ``op``'s messages until it sends a recovery add to ``spare`` - it replaced a
    bookie of the ensemble with the spare and is about to copy the writer's entries there."""
    for _ in range(10_000):
        if any(isinstance(a, A.SendAdd) and a.bookie == spare for a in requests_of(cluster, op)):
            return
        mine = [i for i, (o, _) in enumerate(cluster.queue) if o is op]
        assert mine and not cluster.outputs.get(op), "recovery ended without replacing a bookie"
        cluster.deliver(cluster.rng.choice(mine))
    raise AssertionError("recovery never fed the spare")


def drop(cluster, op) -> None:
    """``op``'s client died: nothing it still had to send or receive arrives."""
    cluster.queue = [(o, a) for o, a in cluster.queue if o is not op]


def deliver_only(cluster, op, newest_first: bool = False):
    """Deliver ``op``'s messages (others wait) until it finished; its Finished action.

    ``newest_first`` answers the latest request first: the fence then hears from the last
    bookies of the ensemble first (one order among the many a network allows)."""
    for _ in range(100_000):
        if cluster.outputs.get(op):
            return cluster.outputs[op][-1]
        mine = [i for i, (o, _) in enumerate(cluster.queue) if o is op]
        assert mine, "recovery stopped without finishing"
        cluster.deliver(mine[-1] if newest_first else cluster.rng.choice(mine))
    raise AssertionError("recovery did not finish")


def entries_after(cluster, digest, done, n_entries: int) -> None:
    """Recovery ``done`` closed the ledger at or past the last acknowledged entry, and every
    entry reads back."""
    assert done.error is None, done.error
    assert done.result[0] >= n_entries - 1, \
        f"closed at {done.result[0]}, below acknowledged entry {n_entries - 1}"
    assert cluster.info.state == LedgerState.CLOSED
    assert cluster.info.last_entry_id == done.result[0]
    data = [x.data for x in read_all(cluster, digest, done.result[0])]
    assert data[:n_entries] == [b"e%d" % i for i in range(n_entries)]


def spare_and_silent(cluster):
    """(the bookie outside the ensemble, the position-2 bookie that holds entry 5 with the
    one at position 0)."""
    ensemble = cluster.info.last_ensemble
    spare = next(b for b in cluster.bookies if b not in ensemble)
    return spare, ensemble[2]


def test_a_retried_recovery_keeps_the_entry_a_failed_recovery_did_not_copy():
    cluster, digest = acknowledged_then_writer_gone((3, 2, 2), N_ENTRIES, seed=1)
    spare, silent = spare_and_silent(cluster)
    cluster.bookies[silent].alive = False  # stops answering: A's re-add of entry 5 fails
    a = start(cluster, digest)
    run_until_it_feeds(cluster, a, spare)
    drop(cluster, a)  # A dies before the spare holds anything
    assert cluster.info.state == LedgerState.IN_RECOVERY
    cluster.bookies[silent].alive = True  # the bookie is back; two bookies hold entry 5
    b = start(cluster, digest)
    done = deliver_only(cluster, b, newest_first=True)  # the spare answers B's fence early
    entries_after(cluster, digest, done, N_ENTRIES)
    assert done.result[0] == N_ENTRIES - 1


def test_a_recovery_running_while_another_is_stuck_after_its_ensemble_change_keeps_the_entry():
    cluster, digest = acknowledged_then_writer_gone((3, 2, 2), N_ENTRIES, seed=2)
    spare, silent = spare_and_silent(cluster)
    cluster.bookies[silent].alive = False
    a = start(cluster, digest)
    run_until_it_feeds(cluster, a, spare)  # A changed the ensemble; its copy to the spare waits
    b = start(cluster, digest)
    done_b = deliver_only(cluster, b, newest_first=True)  # B runs to its end while A is stuck
    entries_after(cluster, digest, done_b, N_ENTRIES)
    done_a = deliver_only(cluster, a)  # then A goes on: it adopts B's close
    assert done_a.error is None and done_a.result == done_b.result
    entries_after(cluster, digest, done_a, N_ENTRIES)


@settings(max_examples=150, deadline=None)
@given(shape=st.sampled_from([(3, 2, 2), (3, 3, 2), (4, 3, 2), (4, 2, 2), (5, 3, 3)]),
       n_entries=st.integers(1, 10), silent=st.integers(0, 4), steps=st.integers(0, 60),
       revive=st.booleans(), newest_first=st.booleans(), seed=st.integers(0, 2**32))
def test_a_recovery_after_a_failed_one_never_closes_below_an_acknowledged_entry(
        shape, n_entries, silent, steps, revive, newest_first, seed):
    """Recovery A, with one bookie of the ensemble silent, dies after ``steps`` deliveries
    (anywhere: before, during or after an ensemble change); recovery B then closes the ledger
    at or past the last acknowledged entry, and every entry reads back."""
    cluster, digest = acknowledged_then_writer_gone(shape, n_entries, seed)
    victim = cluster.info.last_ensemble[silent % shape[0]]
    cluster.bookies[victim].alive = False
    a = start(cluster, digest)
    for _ in range(steps):
        mine = [i for i, (o, _) in enumerate(cluster.queue) if o is a]
        if not mine:
            break
        cluster.deliver(cluster.rng.choice(mine))
    drop(cluster, a)
    cluster.bookies[victim].alive = revive
    b = start(cluster, digest) if cluster.info.state != LedgerState.CLOSED else a
    entries_after(cluster, digest, deliver_only(cluster, b, newest_first), n_entries)
