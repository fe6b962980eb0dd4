"""client/merkle.py against a naive recomputation of RFC 9162 section 2.1."""

import hashlib

import pytest
from hypothesis import given, settings, strategies as st

from bookie.client.merkle import (EMPTY_ROOT, MerkleTree, leaf_hash, verify_consistency,
                                  verify_inclusion)


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def naive_root(payloads) -> bytes:
    n = len(payloads)
    if n == 0:
        return _h(b"")
    if n == 1:
        return _h(b"\x00" + payloads[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return _h(b"\x01" + naive_root(payloads[:k]) + naive_root(payloads[k:]))


def naive_path(m, payloads):
    n = len(payloads)
    if n <= 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return naive_path(m, payloads[:k]) + [naive_root(payloads[k:])]
    return naive_path(m - k, payloads[k:]) + [naive_root(payloads[:k])]


def naive_subproof(m, payloads, whole):
    n = len(payloads)
    if m == n:
        return [] if whole else [naive_root(payloads)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return naive_subproof(m, payloads[:k], whole) + [naive_root(payloads[k:])]
    return naive_subproof(m - k, payloads[k:], False) + [naive_root(payloads[:k])]


def _tree(payloads):
    t = MerkleTree()
    for p in payloads:
        t.append(p)
    return t


def test_known_values():
    assert MerkleTree().root() == EMPTY_ROOT == _h(b"")
    assert _tree([b"a"]).root() == leaf_hash(b"a") == _h(b"\x00a")
    assert _tree([b"a", b"b"]).root() == _h(b"\x01" + _h(b"\x00a") + _h(b"\x00b"))


payload_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=70)


@settings(max_examples=150, deadline=None)
@given(payload_lists, st.data())
def test_root_and_proofs_match_naive(payloads, data):
    tree = _tree(payloads)
    n = data.draw(st.integers(1, len(payloads)))
    prefix = payloads[:n]
    assert tree.root(n) == naive_root(prefix)
    i = data.draw(st.integers(0, n - 1))
    proof = tree.inclusion_proof(i, n)
    assert proof == naive_path(i, prefix)
    root = tree.root_hex(n)
    assert verify_inclusion(root, n, i, payloads[i], proof)
    assert verify_inclusion(root, n, i, payloads[i], [p.hex() for p in proof])
    assert not verify_inclusion(root, n, i, payloads[i] + b"x", proof)
    assert not verify_inclusion(root, n, n, payloads[i], proof)  # past the tree size
    if proof:
        assert not verify_inclusion(root, n, i, payloads[i], proof[:-1])
        assert not verify_inclusion(root, n, i, payloads[i], proof + [proof[0]])
    m = data.draw(st.integers(1, n))
    cproof = tree.consistency_proof(m, n)
    assert cproof == naive_subproof(m, prefix, True)
    assert verify_consistency(tree.root_hex(m), m, root, n, cproof)
    if m < n:
        other = _tree(payloads[:m - 1] + [payloads[m - 1] + b"!"]).root_hex(m)
        assert not verify_consistency(other, m, root, n, cproof)


@settings(max_examples=50, deadline=None)
@given(payload_lists, st.integers(0, 69))
def test_truncate_forgets_leaves(payloads, cut):
    cut = min(cut, len(payloads))
    tree = _tree(payloads)
    tree.truncate(cut)
    assert tree.size == cut and tree.root() == naive_root(payloads[:cut])
    tree.append(b"z")
    assert tree.root() == naive_root(payloads[:cut] + [b"z"])


@pytest.mark.parametrize("args, message", [
    (("zz" * 32, 1, 0, b"a", []), "root must be 64 hex digits"),
    (("00" * 31, 1, 0, b"a", []), "root must be 64 hex digits"),
    (("00" * 32, 2, 0, b"a", ["01"]), "proof element 0"),
    (("00" * 32, 2, 0, b"a", "abc"), "proof must be a list"),
    (("00" * 32, -1, 0, b"a", []), "tree size must be a non-negative integer"),
    (("00" * 32, 1, -2, b"a", []), "entry id must be a non-negative integer"),
    (("00" * 32, 1, 0, "a", []), "payload must be bytes"),
])
def test_malformed_input_is_one_value_error(args, message):
    with pytest.raises(ValueError, match=message):
        verify_inclusion(*args)


def test_consistency_bad_sizes():
    root = _tree([b"a"]).root_hex()
    with pytest.raises(ValueError, match="need 1 <= old size <= new size"):
        verify_consistency(root, 2, root, 1, [])
    with pytest.raises(ValueError, match="old tree size must be 1..1"):
        _tree([b"a"]).consistency_proof(0)
    with pytest.raises(ValueError, match="entry 3 is not in a tree of size 1"):
        _tree([b"a"]).inclusion_proof(3)
