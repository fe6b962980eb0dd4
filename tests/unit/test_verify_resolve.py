"""bookie.client.verify: choosing the replicas' copies that make up a verifiable ledger's root,
and the encoder that hashes a writer's entries (no bookie)."""

from hypothesis import given, settings, strategies as st

from bookie.client.merkle import MerkleTree, leaf_hash
from bookie.client.verify import bad_copies, hashing_encoder, resolve_leaves

BOOKIES = ("a", "b", "c")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=6), min_size=1, max_size=30), st.data())
def test_the_copies_that_make_up_the_root_are_found_and_the_others_named(payloads, data):
    root = MerkleTree(leaf_hash(p) for p in payloads).root_hex()
    copies, tampered = {}, set()
    for e, p in enumerate(payloads):
        copies[e] = {}
        for i, b in enumerate(BOOKIES[:2]):
            bad = i == 0 and data.draw(st.booleans())  # at most one bad copy of each entry
            copies[e][b] = leaf_hash(p + b"!") if bad else leaf_hash(p)
            if bad:
                tampered.add((e, b))
        if data.draw(st.booleans()):
            copies[e]["c"] = "timeout"
            tampered.add((e, "c"))
    leaves, why = resolve_leaves(root, len(payloads), copies) if len(tampered) < 12 else (None, "")
    if leaves is None:
        return  # too many disputed entries to try: refused, never guessed
    assert leaves == [leaf_hash(p) for p in payloads] and why == ""
    assert {(e, b) for e, bs in bad_copies(leaves, copies).items() for b in bs} == tampered


def test_no_copy_that_matches_is_refused():
    payloads = [b"x", b"y", b"z"]
    root = MerkleTree(leaf_hash(p) for p in payloads).root_hex()
    copies = {0: {"a": leaf_hash(b"x")}, 1: {"a": leaf_hash(b"Y"), "b": leaf_hash(b"Y")},
              2: {"a": leaf_hash(b"z")}}
    leaves, why = resolve_leaves(root, 3, copies)
    assert leaves is None and "makes up the ledger's Merkle root" in why
    leaves, why = resolve_leaves(root, 3, {0: {"a": "does not hold it"}})
    assert leaves is None and why == "entry 0: no replica returned a copy"


def test_the_encoder_hashes_each_entry_in_id_order():
    tree = MerkleTree()
    encode = hashing_encoder(tree, lambda first, lac, length, ps: (list(ps), list(range(len(ps)))))
    encode(0, -1, 0, [b"a", b"b"])
    encode(2, 1, 2, [b"c"])
    assert tree.root() == MerkleTree(leaf_hash(p) for p in (b"a", b"b", b"c")).root()
    assert hashing_encoder(None, encode) is encode
