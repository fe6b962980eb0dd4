"""Verifiable ledgers (issue 43) against real bookies: a Merkle root at close, proofs anyone
can check, and a replica whose entry was changed on disk - digest recomputed - never served.
"""

from __future__ import annotations

import os

import pytest

from bookie.appliance.cli import main
from bookie.client import BookKeeper, TamperedEntryError, verify_inclusion
from bookie.client.digest import DigestManager
from bookie.client.merkle import MerkleTree
from bookie.autorecovery.replicator import Replicator
from bookie.client.protocol.copies import replicas
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from bookie.testing.nemesis.tamper import _rewrite as rewrite
from test_client_corrupt_replica import stored_copy

PW = b"pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 30.0}
N = 24


@pytest.fixture(scope="module")
def ensemble():
    with LocalBookies(4) as ens:  # E=3 ledgers and a spare: the auditor's check repoints to it
        yield ens


def tamper(ens: LocalBookies, bookie: str, ledger_id: int, entry_id: int, new_payload: bytes) -> bytes:
    """Stop ``bookie``, replace entry ``entry_id``'s payload in its entry logs by
    ``new_payload`` (same length) with the CRC32C digest recomputed to match, restart it.
    Returns the forged copy (a valid crc32c entry)."""
    copy = stored_copy(bookie, ledger_id, entry_id)
    dm = DigestManager(ledger_id, "crc32c", PW)
    old = dm.decode(copy)
    forged = dm.encode(entry_id, old.lac, old.length, new_payload)
    assert len(forged) == len(copy)
    i = ens.bookies.index(bookie)
    ens.stop(i)
    hits = rewrite([os.path.join(ens.bookie_dir(i), "ledgers")], copy, forged)
    assert hits, f"entry {entry_id} not found in bookie {i}'s ledger storage"
    ens.start(i)
    assert stored_copy(bookie, ledger_id, entry_id) == forged
    return forged


def write_closed(bk, payloads):
    lh = bk.create_ledger(3, 2, 2, digest="crc32c", password=PW, verifiable=True)
    lh.add_range_async(payloads).result(30)
    lh.close()
    return lh


def verifyledger(ens, capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["shell", "verifyledger", *map(str, argv), "--metadata", ens.metadata_uri,
               "--password", PW.decode()])
    captured = capsys.readouterr()
    return rc, captured.out if rc in (0, 1) else captured.err


def test_tampered_replica_is_never_served(ensemble, capsys):
    payloads = [b"entry-%02d-" % i + os.urandom(30) for i in range(N)]
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        lh = write_closed(bk, payloads)
        lid = lh.ledger_id
        meta = bk.ledger_metadata(lid)
        assert meta.verifiable and meta.tree_size == N
        expected = MerkleTree()
        for p in payloads:
            expected.append(p)
        assert meta.merkle_root == expected.root_hex() == lh.merkle_root()
        # every entry's proof verifies with nothing but the root, the size and the payload
        for e, p in enumerate(payloads):
            assert verify_inclusion(meta.merkle_root, N, e, p, lh.inclusion_proof(e))
        rh = bk.open_ledger(lid, digest="crc32c", password=PW)
        assert [verify_inclusion(meta.merkle_root, N, e, p, rh.inclusion_proof(e))
                for e, p in enumerate(payloads)] == [True] * N
        info = lh.metadata
    entry_id = 7
    bad = replicas(info, entry_id)[0]  # where reads of the entry start
    forged = tamper(ensemble, bad, lid, entry_id, b"X" * len(payloads[entry_id]))
    # a plain crc32c read would take the forged copy: its digest is good
    assert DigestManager(lid, "crc32c", PW).decode(forged).data == b"X" * len(payloads[entry_id])
    with BookKeeper(ensemble.metadata_uri, dict(CONFIG, enableClientMetrics=True)) as bk:
        rh = bk.open_ledger(lid, digest="crc32c", password=PW)
        assert rh.read_entry(entry_id).data == payloads[entry_id]
        assert [e.data for e in rh.read_entries(0, N - 1)] == payloads
        assert verify_inclusion(rh.merkle_root(), N, entry_id, payloads[entry_id],
                                rh.inclusion_proof(entry_id))
        from prometheus_client import REGISTRY
        assert REGISTRY.get_sample_value("bookkeeper_client_verify_failures_total") >= 1
    rc, out = verifyledger(ensemble, capsys, lid)
    assert rc == 1, out
    assert out.splitlines() == [f"ledger {lid} entry {entry_id} on bookie {bad}: does not match the Merkle root"], out
    good = replicas(info, entry_id)[1]
    rc, out = verifyledger(ensemble, capsys, lid, "--bookie", good)
    assert rc == 0 and "match its Merkle root" in out, out
    # the auditor's entry check treats the copy like a lost one: healed from a matching copy
    store = open_metadata(ensemble.metadata_uri)
    rep = Replicator(store, passwords=[PW])
    try:
        assert rep.fill(lid) >= 1
    finally:
        rep.close()
        store.close()
    rc, out = verifyledger(ensemble, capsys, lid)
    assert rc == 0, out
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        healed = bk.open_ledger(lid, digest="crc32c", password=PW)
        assert bad not in healed.metadata.ensemble_for(entry_id)
        assert [e.data for e in healed.read_entries(0, N - 1)] == payloads


def test_verifyledger_refuses_a_plain_or_open_ledger(ensemble, capsys):
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        plain = bk.create_ledger(3, 2, 2, digest="crc32c", password=PW)
        plain.add_entry(b"x")
        plain.close()
        rc, out = verifyledger(ensemble, capsys, plain.ledger_id)
        assert rc == 2 and "is not verifiable" in out, out
        open_one = bk.create_ledger(3, 2, 2, digest="crc32c", password=PW, verifiable=True)
        open_one.add_entry(b"x")
        rc, out = verifyledger(ensemble, capsys, open_one.ledger_id)
        assert rc == 2 and "not closed" in out, out
        open_one.close()
        rc, out = verifyledger(ensemble, capsys, open_one.ledger_id)
        assert rc == 0, out


def test_no_matching_replica_fails_with_tampered_entry_error(ensemble):
    payloads = [b"p%02d" % i for i in range(8)]
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        lh = write_closed(bk, payloads)
        info = lh.metadata
    for bookie in replicas(info, 3):
        tamper(ensemble, bookie, lh.ledger_id, 3, b"q03")
    with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
        rh = bk.open_ledger(lh.ledger_id, digest="crc32c", password=PW)
        with pytest.raises(TamperedEntryError, match=f"ledger {lh.ledger_id}"):
            rh.read_entry(3)
        with pytest.raises(TamperedEntryError):
            rh.read_entry(0)  # never other bytes: the ledger cannot be verified at all


def test_recovery_closes_with_the_root_of_the_recovered_entries(ensemble):
    payloads = [b"r%03d" % i for i in range(15)]
    with BookKeeper(ensemble.metadata_uri, CONFIG) as writer_client:
        lh = writer_client.create_ledger(3, 2, 2, digest="crc32c", password=PW,
                                         verifiable=True)
        lh.add_range_async(payloads).result(30)
        checkpoint = lh.merkle_root()
        assert lh.merkle_tree_size() == 15
        with BookKeeper(ensemble.metadata_uri, CONFIG) as bk:
            rh = bk.open_ledger(lh.ledger_id, digest="crc32c", password=PW)  # recovers
            meta = bk.ledger_metadata(lh.ledger_id)
            assert meta.is_closed and meta.tree_size == meta.last_entry_id + 1
            tree = MerkleTree()
            for p in payloads[:meta.tree_size]:
                tree.append(p)
            assert meta.merkle_root == tree.root_hex() == rh.merkle_root()
            assert meta.last_entry_id == 14 and checkpoint == meta.merkle_root
            assert [e.data for e in rh.read_entries(0, 14)] == payloads
