"""What a bookie's owner resolver spends on other people's verifiers (issue 33, item 4;
workers/claims.py): only the verifier parameters the product writes are evaluated, any other
is refused at once; and each client identity has a lane of its own, served in turn, so a
stranger's flood of made-up keys delays a known writer by one evaluation at most."""

from __future__ import annotations

import time

from bookie.core.ledgers import LedgerTable
from bookie.metadata.ledger import SCRYPT_LOG2_N, SCRYPT_P, SCRYPT_R, make_verifier
from bookie.workers import claims
from bookie.workers.claims import (ALLOWED_VERIFIERS, OwnerLookup, OwnerResolver, _Lanes,
                                   allowed_verifier, bounded_key_check)

KEY = b"k" * 20


def hostile(log2_n: int, r: int, p: int) -> bytes:
    """A verifier as a client could write it into its own ledger's record (never evaluated)."""
    return bytes((2, log2_n, r, p)) + b"s" * 16 + b"h" * 32


def test_only_the_products_parameters_are_allowed():
    assert (SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P) in ALLOWED_VERIFIERS
    assert max(128 * r * (1 << n) * p for n, r, p in ALLOWED_VERIFIERS) <= 16 << 20
    assert allowed_verifier(make_verifier(KEY))
    assert bounded_key_check(make_verifier(KEY), KEY)
    assert not bounded_key_check(make_verifier(KEY), b"x" * 20)
    assert allowed_verifier(b"s" * 16 + b"h" * 32)  # an older record's salted SHA-256


def test_other_parameters_are_refused_without_an_evaluation(monkeypatch):
    evaluated = []
    monkeypatch.setattr(claims, "key_check_matches", lambda *a: evaluated.append(a) or True)
    for params in ((20, 8, 1), (18, 16, 4), (12, 8, 2), (13, 8, 1), (12, 1, 1)):
        check = hostile(*params)
        assert not allowed_verifier(check)
        assert not bounded_key_check(check, KEY)
    assert evaluated == []  # 1 GiB of scrypt would take seconds: never begun


def test_lanes_serve_each_principal_in_turn():
    lanes = _Lanes()
    for i in range(5):
        lanes.put("stranger", ("s", i))
    lanes.put("writer", ("w", 0))
    lanes.put("other", ("o", 0))
    got = [lanes.get() for _ in range(7)]
    assert got[:4] == [("s", 0), ("w", 0), ("o", 0), ("s", 1)]
    lanes.close()
    assert lanes.get() is None


class _NoStore(OwnerLookup):
    def __init__(self):
        super().__init__("lmdb:///nonexistent")

    def owner(self, ledger_id):
        raise AssertionError("every owner is known in this test")


def test_a_strangers_flood_delays_a_known_writer_by_one_evaluation_at_most():
    evaluated = []

    def slow_verify(check, key):  # an evaluation that takes 20 ms, as scrypt does
        time.sleep(0.02)
        evaluated.append(key)
        return key == KEY

    resolver = OwnerResolver(_NoStore(), verify=slow_verify)
    table = LedgerTable()
    try:
        check = make_verifier(KEY)
        for lid in (1, 2):
            resolver.known[lid] = check
        for i in range(claims.MAX_JOBS_PER_PRINCIPAL):  # the stranger's share, made-up keys
            assert not resolver.ready(table, 1, b"made-up-%03d" % i, False, principal="stranger")
        # past its share the stranger is refused at once (decided now: TOO_MANY_REQUESTS)
        assert resolver.ready(table, 1, b"one-too-many", False, principal="stranger")
        assert not resolver.ready(table, 2, KEY, False, principal="writer")
        before = len(evaluated)  # the stranger's evaluations done by the time the writer asked
        deadline = time.monotonic() + 10
        while KEY not in evaluated:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert evaluated.index(KEY) <= before + 1, (evaluated.index(KEY), before)
        while not resolver.done:
            time.sleep(0.005)
        resolver.drain()
        assert resolver.verified(check, KEY)
    finally:
        resolver.close()


def test_a_hostile_check_is_decided_at_once_without_queueing():
    resolver = OwnerResolver(_NoStore(), verify=lambda c, k: (_ for _ in ()).throw(AssertionError))
    table = LedgerTable()
    try:
        resolver.known[7] = hostile(20, 8, 1)
        assert resolver.ready(table, 7, KEY, False, principal="p")
        assert resolver.verified(hostile(20, 8, 1), KEY) is False
        assert not resolver.queued
    finally:
        resolver.close()
