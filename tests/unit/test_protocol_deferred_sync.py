"""The writer's deferred sync (BookKeeper's WriteFlag.DEFERRED_SYNC), pure, on the simulated
cluster of test_protocol_model: adds are confirmed as they are acknowledged while the LAC the
writer shows - to its caller, piggybacked, in explicit LACs - stays at the last force()."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.digest import DigestManager
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.writer import LedgerWriter
from test_protocol_model import LEDGER, SimBookie, SimCluster, confirms, read_all


def deferred_ledger(rng, deferred=True, e=3, w=2, a=2):
    names = [f"b{i}:3181" for i in range(e)]
    info = LedgerInfo(LEDGER, e, w, a, fragments=((0, tuple(names)),))
    cluster = SimCluster(names, info, rng)
    digest = DigestManager(LEDGER, "crc32c", b"pw")
    writer = LedgerWriter(info, 0, digest.encode, rng=rng, explicit_lac_interval_s=0.01,
                          deferred_sync=deferred)
    return cluster, writer


def forced(cluster, writer):
    return [a for a in cluster.outputs.get(writer, []) if isinstance(a, A.Forced)]


def test_adds_confirm_but_the_lac_waits_for_force():
    cluster, writer = deferred_ledger(random.Random(1))
    for i in range(5):
        cluster.run(writer, writer.add([b"d%d" % i])[1])
    cluster.deliver_until(lambda: False)
    assert [(c.first, c.last) for c in confirms(cluster, writer)][-1][1] == 4
    assert writer.lac == -1 and writer.last_add_pushed == 4
    cluster.run(writer, writer.tick(10.0))  # an idle writer's explicit LAC tells nothing new
    cluster.deliver_until(lambda: False)
    assert max(b.lac for b in cluster.bookies.values()) == -1  # nothing piggybacked either
    cluster.run(writer, writer.force())
    cluster.deliver_until(lambda: False)
    assert [f.last for f in forced(cluster, writer)] == [4] and writer.lac == 4
    assert all(b.lac == 4 for b in cluster.bookies.values())  # told at once
    cluster.run(writer, writer.add([b"d5"])[1])
    cluster.deliver_until(lambda: False)
    assert writer.lac == 4  # the next force moves it again


def test_a_force_waits_for_outstanding_adds_and_forces_complete_in_order():
    cluster, writer = deferred_ledger(random.Random(2))
    cluster.run(writer, writer.add([b"x", b"y"])[1])
    first = writer.force()  # before any acknowledgement: nothing comes out yet
    assert not [a for a in first if isinstance(a, A.Forced)]
    cluster.run(writer, first)
    cluster.run(writer, writer.add([b"z"])[1])
    cluster.run(writer, writer.force())
    cluster.deliver_until(lambda: False)
    assert [f.last for f in forced(cluster, writer)] == [1, 2] and writer.lac == 2


def test_without_deferred_sync_the_lac_moves_with_acks_and_force_only_waits():
    cluster, writer = deferred_ledger(random.Random(3), deferred=False)
    cluster.run(writer, writer.add([b"a", b"b", b"c"])[1])
    cluster.deliver_until(lambda: False)
    assert writer.lac == 2
    cluster.run(writer, writer.force())
    cluster.deliver_until(lambda: False)
    assert [f.last for f in forced(cluster, writer)] == [2]


def test_close_closes_at_the_last_acknowledged_entry():
    cluster, writer = deferred_ledger(random.Random(4))
    cluster.run(writer, writer.add([b"a", b"b"])[1])
    cluster.deliver_until(lambda: False)
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: False)
    assert cluster.info.last_entry_id == 1


def _sends(cluster, kind):
    return [a for _, a in cluster.queue if isinstance(a, kind)]


def test_force_asks_every_bookie_of_the_ensemble_and_moves_the_lac_only_when_all_answered():
    cluster, writer = deferred_ledger(random.Random(5), e=3, w=2, a=2)
    cluster.run(writer, writer.add([b"a", b"b", b"c"])[1])
    cluster.deliver_until(lambda: False)
    cluster.run(writer, writer.force())
    forces = _sends(cluster, A.SendForce)
    assert sorted(f.bookie for f in forces) == sorted(cluster.bookies)  # all E, not Qa
    while len(_sends(cluster, A.SendForce)) > 1:
        i = next(i for i, (_, a) in enumerate(cluster.queue) if isinstance(a, A.SendForce))
        cluster.deliver(i)
        assert writer.lac == -1 and not forced(cluster, writer)  # one bookie still to answer
    cluster.deliver_until(lambda: False)
    assert [f.last for f in forced(cluster, writer)] == [2] and writer.lac == 2
    for b in cluster.bookies.values():
        assert set(b.entries) <= b.durable


def _one_entry_then_dead(seed: int, dead: str):
    """An E2/Qw2/Qa2 deferred ledger with one entry acknowledged, then bookie ``dead`` gone."""
    cluster, writer = deferred_ledger(random.Random(seed), e=2, w=2, a=2)
    cluster.run(writer, writer.add([b"a"])[1])
    cluster.deliver_until(lambda: False)
    cluster.bookies[dead].alive = False
    return cluster, writer


def test_a_force_whose_lost_bookie_cannot_be_replaced_fails_and_leaves_the_lac():
    cluster, writer = _one_entry_then_dead(6, "b1:3181")  # no spare bookie
    cluster.run(writer, writer.force())
    cluster.deliver_until(lambda: False)
    [f] = forced(cluster, writer)
    assert f.error is not None and "b1:3181 stopped answering" in str(f.error)
    assert writer.lac == -1


def test_close_forces_first_so_the_closed_ledger_ends_at_a_durable_entry():
    cluster, writer = deferred_ledger(random.Random(7))
    cluster.run(writer, writer.add([b"a", b"b"])[1])
    cluster.deliver_until(lambda: False)
    cluster.run(writer, writer.close())
    assert _sends(cluster, A.SendForce) and not _sends(cluster, A.WriteMetadata)  # force first
    cluster.deliver_until(lambda: False)
    assert cluster.info.last_entry_id == 1
    for b in cluster.bookies.values():
        assert set(b.entries) <= b.durable


def test_a_close_whose_force_fails_fails_and_leaves_the_ledger_open():
    cluster, writer = _one_entry_then_dead(8, "b0:3181")
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: False)
    [done] = [a for a in cluster.outputs[writer] if isinstance(a, A.Finished)]
    assert done.error is not None and cluster.info.state != LedgerState.CLOSED


# -- a deferred-sync writer that loses a bookie (issue 39 item 4) ----------------------------------

def _durable_up_to(cluster, lac: int) -> bool:
    """Every entry up to ``lac`` is durable on every bookie the stored metadata names for it."""
    info, e_size, qw = cluster.info, cluster.info.ensemble_size, cluster.info.write_quorum
    for e in range(lac + 1):
        ensemble = [ens for first, ens in info.fragments if first <= e][-1]
        for k in range(qw):
            bookie = cluster.bookies[ensemble[(e + k) % e_size]]
            if e not in bookie.durable:
                return False
    return True


def _lose_a_bookie_then_force_and_close(seed: int, lose_after: int, force_at: int, n: int = 10):
    """E3/Qw2/Qa2 over four bookies, deferred sync: ``n`` adds with deliveries in between; one
    ensemble bookie dies after ``lose_after`` deliveries; force() after add ``force_at``; then
    close.  Checks after every delivery that the writer's LAC never passes a durable entry."""
    rng = random.Random(seed)
    names = [f"b{i}:3181" for i in range(4)]
    info = LedgerInfo(LEDGER, 3, 2, 2, fragments=((0, tuple(names[:3])),))
    cluster = SimCluster(names, info, rng)
    digest = DigestManager(LEDGER, "crc32c", b"pw")
    writer = LedgerWriter(info, 0, digest.encode, rng=rng, deferred_sync=True)
    victim = names[rng.randrange(3)]
    steps = 0

    def step():
        nonlocal steps
        steps += 1
        if steps == lose_after:
            cluster.bookies[victim].alive = False
        cluster.deliver(rng.randrange(len(cluster.queue)))
        assert _durable_up_to(cluster, writer.lac), (writer.lac, cluster.info)

    for i in range(n):
        cluster.run(writer, writer.add([b"d%d" % i])[1])
        if i == force_at:
            cluster.run(writer, writer.force())
        for _ in range(rng.randrange(4)):
            if cluster.queue:
                step()
    cluster.bookies[victim].alive = False  # lost for good, if not already
    cluster.run(writer, writer.force())
    while cluster.queue:
        step()
    cluster.run(writer, writer.close())
    while cluster.queue:
        step()
    return cluster, digest, writer, victim


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lose_after=st.integers(1, 30), force_at=st.integers(0, 9))
def test_a_deferred_writer_that_loses_a_bookie_replaces_it_and_force_and_close_succeed(
        seed, lose_after, force_at):
    cluster, digest, writer, victim = _lose_a_bookie_then_force_and_close(seed, lose_after,
                                                                          force_at)
    assert all(f.error is None for f in forced(cluster, writer))
    [done] = [a for a in cluster.outputs[writer] if isinstance(a, A.Finished)]
    assert done.error is None, done.error
    confirmed = max(c.last for c in confirms(cluster, writer))
    assert cluster.info.state == LedgerState.CLOSED and cluster.info.last_entry_id == confirmed
    assert _durable_up_to(cluster, confirmed)  # written again where the change put them
    got = read_all(cluster, digest, confirmed)
    assert [bytes(e.data) for e in got] == [b"d%d" % i for i in range(confirmed + 1)]


def test_a_deferred_writer_forces_after_losing_a_bookie_without_asking_it():
    cluster, writer = deferred_ledger(random.Random(9), e=2, w=2, a=2)
    cluster.bookies["b2:3181"] = SimBookie()  # a spare
    cluster.run(writer, writer.add([b"a", b"b"])[1])
    cluster.deliver_until(lambda: False)  # acknowledged, not forced
    cluster.bookies["b1:3181"].alive = False
    cluster.run(writer, writer.add([b"c"])[1])
    cluster.deliver_until(lambda: False)
    assert cluster.info.fragments[-1] == (0, ("b0:3181", "b2:3181"))  # from the forced LAC + 1
    cluster.run(writer, writer.force())
    assert "b1:3181" not in {a.bookie for _, a in cluster.queue if isinstance(a, A.SendForce)}
    cluster.deliver_until(lambda: False)
    assert [f.last for f in forced(cluster, writer)] == [2] and writer.lac == 2
    assert set(cluster.bookies["b2:3181"].durable) == {0, 1, 2}
