"""The writer's metadata update loop (issue 39 item 1), pure, on the simulated cluster of
test_protocol_model: an ensemble change that loses its compare-and-swap re-reads the metadata
and applies its change again to what it read ("replace the bookie at position p while it is
still the one that failed"), never writing back a fragment it read before.

The other change here is ``updateledgers`` renaming a bookie (stopped or not) while a
write-quorum-1 writer is open: whatever the interleaving, the writer keeps the new name, the
old one is named by no fragment afterwards, and every confirmed entry reads back from the
closed ledger.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerState
from test_protocol_model import SimBookie, confirms, new_ledger, read_all

OLD, NEW = "b0:3181", "b9:3181"


def rename(cluster, old: str, new: str) -> None:
    """What stop, ``updatecookie`` and ``updateledgers`` leave: the bookie's disks answer to
    ``new``; the old id answers nothing (no registration) and the ensembles name ``new``."""
    cluster.bookies[new] = cluster.bookies.pop(old)
    gone = cluster.bookies[old] = SimBookie()
    gone.alive = False
    cluster.info = cluster.info.replace(fragments=tuple(
        (first, tuple(new if b == old else b for b in ensemble))
        for first, ensemble in cluster.info.fragments))
    cluster.version += 1


def named(info) -> set[str]:
    return {b for _, ensemble in info.fragments for b in ensemble}


def run_with_rename(seed: int, down_at: int, rename_at: int, back: bool, n: int = 12):
    rng = random.Random(seed)
    cluster, digest, writer = new_ledger(2, 1, 1, 3, rng)  # Qw1, ensemble (OLD, b1), b2 spare
    steps = 0
    for i in range(n):
        cluster.run(writer, writer.add([b"e%d" % i])[1])
        for _ in range(rng.randrange(4)):
            if not cluster.queue:
                break
            steps += 1
            if steps == down_at:
                cluster.bookies[OLD].alive = False  # stopped
            if steps == rename_at and OLD in named(cluster.info):
                rename(cluster, OLD, NEW)
                cluster.bookies[NEW].alive = back  # started again, or not yet
            cluster.deliver(rng.randrange(len(cluster.queue)))
    if NEW not in cluster.bookies:
        rename(cluster, OLD, NEW)
    cluster.bookies[NEW].alive = True  # the procedure ends with the start
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: False)
    return cluster, digest, writer


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), down_at=st.integers(1, 30), later=st.integers(0, 20),
       back=st.booleans())
def test_a_rename_at_any_point_keeps_every_confirmed_entry_named_and_readable(
        seed, down_at, later, back):
    cluster, digest, writer = run_with_rename(seed, down_at, down_at + later, back)
    [done] = [a for a in cluster.outputs[writer] if isinstance(a, A.Finished)]
    assert done.error is None, done.error
    assert cluster.info.state is LedgerState.CLOSED
    assert OLD not in named(cluster.info)  # the stale name is never written back
    last = cluster.info.last_entry_id
    confirmed = max((c.last for c in confirms(cluster, writer)), default=-1)
    assert last >= confirmed
    got = read_all(cluster, digest, last)
    assert [bytes(e.data) for e in got] == [b"e%d" % i for i in range(last + 1)]


def test_a_lost_cas_reapplies_the_change_to_the_renamed_ensemble():
    """The issue's case: entries acknowledged on OLD, OLD stopped and renamed while the writer
    replaces it; its CAS loses to the rename and it takes NEW instead of writing OLD back."""
    rng = random.Random(3)
    cluster, digest, writer = new_ledger(1, 1, 1, 2, rng)  # ensemble (OLD,), b1 spare
    for i in range(5):
        cluster.run(writer, writer.add([b"e%d" % i])[1])
    cluster.deliver_until(lambda: False)
    cluster.bookies[OLD].alive = False
    cluster.run(writer, writer.add([b"e5"])[1])
    cluster.deliver_until(lambda: not any(isinstance(a, A.WriteMetadata)
                                          for _, a in cluster.queue))
    rename(cluster, OLD, NEW)  # lands before the writer's change: its CAS loses
    cluster.bookies[NEW].alive = True  # and the bookie starts under its new id
    cluster.deliver_until(lambda: False)
    assert cluster.info.fragments[0] == (0, (NEW,))
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: False)
    assert OLD not in named(cluster.info) and cluster.info.last_entry_id == 5
    assert [bytes(e.data) for e in read_all(cluster, digest, 5)] == [b"e%d" % i for i in range(6)]
