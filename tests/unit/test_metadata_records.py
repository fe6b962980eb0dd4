"""Ledger metadata records and metadata URIs: pure code, no store."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.metadata import (
    CorruptMetadataError, InvalidUriError, LedgerMetadata, LedgerState, open_metadata, parse_uri)

BOOKIES = [f"10.0.0.{i}:3181" for i in range(1, 10)]


@st.composite
def ledger_metadata(draw):
    ack = draw(st.integers(1, 4))
    write = draw(st.integers(ack, 5))
    size = draw(st.integers(write, 6))
    firsts = sorted(draw(st.sets(st.integers(1, 10**12), max_size=4)))
    fragments = [(first, draw(st.permutations(BOOKIES))[:size]) for first in [0] + firsts]
    return LedgerMetadata(
        ensemble_size=size, write_quorum=write, ack_quorum=ack,
        state=draw(st.sampled_from(list(LedgerState))),
        last_entry_id=draw(st.integers(-1, 2**63 - 1)),
        length=draw(st.integers(0, 2**63 - 1)),
        digest_type=draw(st.sampled_from(["crc32", "crc32c", "mac", "dummy"])),
        password_digest=draw(st.binary(max_size=32)),
        ctime_ms=draw(st.integers(0, 2**62)),
        custom=draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)),
        fragments=fragments)


@settings(max_examples=150, deadline=None)
@given(ledger_metadata())
def test_record_round_trips(record):
    assert LedgerMetadata.from_bytes(record.to_bytes()) == record


@settings(max_examples=150, deadline=None)
@given(ledger_metadata(), st.integers(0, 10**13))
def test_ensemble_for_is_the_last_fragment_starting_at_or_before_the_entry(record, entry_id):
    expected = [ensemble for first, ensemble in record.fragments if first <= entry_id][-1]
    assert record.ensemble_for(entry_id) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_bytes_raise_corrupt_metadata_never_anything_else(data):
    try:
        LedgerMetadata.from_bytes(data, what="ledger 7")
    except CorruptMetadataError as e:
        assert str(e).startswith("ledger 7:")


@pytest.mark.parametrize("mutation, message", [
    (lambda d: d.update(format_version=3), "unknown metadata format version"),
    (lambda d: d.pop("fragments"), "lacks field"),
    (lambda d: d.update(write_quorum=5), "ensemble_size >= write_quorum"),
    (lambda d: d.update(state="HALF_OPEN"), "invalid metadata record"),
    (lambda d: d.update(fragments=[[0, ["a:1", "a:1", "b:1"]]]), "names a bookie twice"),
    (lambda d: d.update(fragments=[[3, ["a:1", "b:1", "c:1"]]]), "start at entry 0"),
    (lambda d: d.update(fragments=[[0, "abc"]]), "a fragment is"),
    (lambda d: d.update(password_digest="%%%"), "invalid metadata record"),
    (lambda d: d.update(custom={"k": 1}), "custom must map str to str"),
])
def test_invalid_records_are_refused_with_the_reason(mutation, message):
    doc = LedgerMetadata(3, 2, 2, fragments=[(0, ["a:1", "b:1", "c:1"])]).to_dict()
    mutation(doc)
    with pytest.raises(CorruptMetadataError, match=message):
        LedgerMetadata.from_bytes(orjson.dumps(doc), what="ledger 9")


def test_unknown_keys_are_ignored_for_forward_compatibility():
    doc = LedgerMetadata(1, 1, 1).to_dict()
    doc["added_later"] = [1, 2]
    assert LedgerMetadata.from_bytes(orjson.dumps(doc)) == LedgerMetadata(
        1, 1, 1, ctime_ms=doc["ctime_ms"])


def test_construction_validates_quorums_and_fragments():
    with pytest.raises(ValueError, match="ensemble_size >= write_quorum"):
        LedgerMetadata(2, 3, 1)
    with pytest.raises(ValueError, match="ack_quorum >= 1"):
        LedgerMetadata(3, 2, 0)
    with pytest.raises(ValueError, match="has 2 bookies"):
        LedgerMetadata(3, 2, 2, fragments=[(0, ["a:1", "b:1"])])
    with pytest.raises(ValueError, match="ascend"):
        LedgerMetadata(1, 1, 1, fragments=[(0, ["a:1"]), (0, ["b:1"])])
    with pytest.raises(ValueError, match="digest_type"):
        LedgerMetadata(1, 1, 1, digest_type="md5")


def test_state_accepts_its_names():
    assert LedgerMetadata(1, 1, 1, state="CLOSED").state is LedgerState.CLOSED
    assert LedgerState.CLOSED == "CLOSED"


@pytest.mark.parametrize("uri, expected", [
    ("zk://127.0.0.1:2181/ledgers", ("zk", ("127.0.0.1:2181",), "/ledgers", None)),
    ("zk://a:1,b:2", ("zk", ("a:1", "b:2"), "/ledgers", None)),
    ("zk+flat://a:1/x/y/", ("zk", ("a:1",), "/x/y", "flat")),
    ("zk+hierarchical://a:1/x", ("zk", ("a:1",), "/x", "hierarchical")),
])
def test_zookeeper_uris_parse(uri, expected):
    parsed = parse_uri(uri)
    assert (parsed.scheme, parsed.hosts, parsed.root, parsed.layout) == expected


def test_lmdb_uri_parses_to_its_directory():
    assert parse_uri("lmdb:///var/lib/bookie/md").path == "/var/lib/bookie/md"


@pytest.mark.parametrize("uri", [
    "", "ledgers", "http://a:1/x", "zk://", "zk://host/x", "zk://a:99999/x", "zk://a:1/",
    "zk://a:1/x/../y", "zk://a:1/x?y=1", "lmdb://relative/path", "lmdb:///", "lmdb://host/p",
])
def test_malformed_uris_are_refused_clearly(uri):
    with pytest.raises(InvalidUriError):
        open_metadata(uri, timeout_s=0.5)


# -- format 2: features (issue 43) ------------------------------------------------------------

def _verifiable(**kw) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, fragments=[(0, ["a:1", "b:1", "c:1"])],
                          features=["verifiable"], **kw)


def test_a_record_without_features_stays_format_1_and_a_verifiable_one_is_format_2():
    assert LedgerMetadata(3, 2, 2, fragments=[(0, ["a:1", "b:1", "c:1"])]).to_dict()["format_version"] == 1
    closed = _verifiable(state="CLOSED", last_entry_id=4, merkle_root="ab" * 32, tree_size=5)
    doc = closed.to_dict()
    assert doc["format_version"] == 2 and doc["features"] == ["verifiable"]
    back = LedgerMetadata.from_bytes(closed.to_bytes())
    assert back.verifiable and back.merkle_root == "ab" * 32 and back.tree_size == 5


@pytest.mark.parametrize("fields, message", [
    ({}, "needs merkle_root"),
    ({"merkle_root": "AB" * 32, "tree_size": 5}, "needs merkle_root"),
    ({"merkle_root": "ab" * 32, "tree_size": 4}, "tree_size must be last_entry_id"),
])
def test_a_closed_verifiable_record_needs_its_root(fields, message):
    with pytest.raises(ValueError, match=message):
        _verifiable(state="CLOSED", last_entry_id=4, **fields)


def test_unknown_features_are_read_but_named():
    meta = _verifiable()
    meta.features.append("from-the-future")
    back = LedgerMetadata.from_bytes(meta.to_bytes())
    assert back.unknown_features == ["from-the-future"] and back.verifiable


def test_the_client_refuses_to_close_what_it_cannot_close_right():
    from bookie.client.errors import MetadataStoreError
    from bookie.client.metadata import check_closable, to_info
    meta = _verifiable()
    info = to_info(1, meta).replace(state="CLOSED")
    with pytest.raises(MetadataStoreError, match="must carry the Merkle root"):
        check_closable(1, meta, info)
    check_closable(1, meta, info.replace(merkle_root="ab" * 32))
    meta.features.append("from-the-future")
    with pytest.raises(MetadataStoreError, match="does not know \\(from-the-future\\)"):
        check_closable(1, meta, info.replace(merkle_root="ab" * 32))
