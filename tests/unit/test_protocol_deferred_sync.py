"""The writer's deferred sync (BookKeeper's WriteFlag.DEFERRED_SYNC), pure, on the simulated
cluster of test_protocol_model: adds are confirmed as they are acknowledged while the LAC the
writer shows - to its caller, piggybacked, in explicit LACs - stays at the last force()."""

from __future__ import annotations

import random

from bookie.client.digest import DigestManager
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.writer import LedgerWriter
from test_protocol_model import LEDGER, SimCluster, confirms


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


def test_a_force_a_bookie_does_not_answer_fails_and_leaves_the_lac():
    cluster, writer = _one_entry_then_dead(6, "b1:3181")
    cluster.run(writer, writer.force())
    cluster.deliver_until(lambda: False)
    [f] = forced(cluster, writer)
    assert f.error is not None and "FORCE_LEDGER" in str(f.error) and writer.lac == -1


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
