"""A verifiable ledger's close carries the Merkle root of exactly the entries it closes with:
the writer's close (its own tree) and a recovery's (entries read back and hashed), with some of
the writer's adds never delivered and concurrent recoveries (pure protocol, simulated bookies)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.merkle import MerkleTree
from bookie.client.protocol import actions as A
from bookie.client.protocol.writer import LedgerWriter
from bookie.client.verify import hashing_encoder
from bookie.metadata import LedgerState
from test_protocol_model import new_ledger, recover


def root_of(payloads) -> str:
    tree = MerkleTree()
    for p in payloads:
        tree.append(p)
    return tree.root_hex()


def verifiable_writer(cluster, digest, rng):
    cluster.info = cluster.info.replace(verifiable=True)
    tree = MerkleTree()
    writer = LedgerWriter(cluster.info, 0, digest.encode, rng=rng,
                          encode_many=hashing_encoder(tree, digest.encode_many))
    writer.merkle = tree
    return writer


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from([(3, 2, 2), (3, 3, 2), (4, 3, 2)]), n=st.integers(0, 12),
       delivered=st.integers(0, 40), readers=st.integers(1, 3), seed=st.integers(0, 2**32))
def test_recovery_closes_with_the_root_of_the_recovered_entries(shape, n, delivered, readers, seed):
    rng = random.Random(seed)
    cluster, digest, _ = new_ledger(*shape, shape[0] + 1, rng)
    writer = verifiable_writer(cluster, digest, rng)
    payloads = [b"e%d" % i for i in range(n)]
    if payloads:
        cluster.run(writer, writer.add(payloads)[1])
    for _ in range(delivered):  # some adds reach their bookies, the rest never do
        if not cluster.queue:
            break
        cluster.deliver(rng.randrange(len(cluster.queue)))
    cluster.queue.clear()
    closed = recover(cluster, digest, readers)
    roots = {c.merkle_root for c in closed}
    assert len(roots) == 1
    last = closed[0].last_entry_id
    assert closed[0].state is LedgerState.CLOSED and last >= writer.lac
    assert roots.pop() == root_of(payloads[:last + 1])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 20), seed=st.integers(0, 2**32))
def test_the_writers_close_carries_the_root_of_its_confirmed_entries(n, seed):
    rng = random.Random(seed)
    cluster, digest, _ = new_ledger(3, 2, 2, 3, rng)
    writer = verifiable_writer(cluster, digest, rng)
    payloads = [b"w%d" % i for i in range(n)]
    if payloads:
        cluster.run(writer, writer.add(payloads)[1])
    cluster.deliver_until(lambda: False)
    cluster.run(writer, writer.close())
    cluster.deliver_until(lambda: cluster.info.state is LedgerState.CLOSED)
    assert cluster.info.last_entry_id == n - 1
    assert cluster.info.merkle_root == root_of(payloads)
    assert not [a for a in cluster.outputs.get(writer, []) if isinstance(a, A.Finished) and a.error]
