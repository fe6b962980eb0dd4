"""The client's per-batch encoder (``DigestManager.encode_many`` building one buffer) against
the entry-by-entry one, byte for byte, and the ``wire.EntryBatch`` it returns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import wire
from bookie.client import digest as digest_mod
from bookie.client.digest import DIGEST_TYPES, DigestManager

ids = st.integers(0, 2**63 - 1)
RUN_MIN = 8  # the one-buffer path from 8 entries on here, whatever the client's threshold


@pytest.fixture(autouse=True, scope="module")
def small_runs():
    """Small batches take the one-buffer path in these tests (module-wide: hypothesis)."""
    saved, digest_mod.ENCODE_RUN_MIN_ENTRIES = digest_mod.ENCODE_RUN_MIN_ENTRIES, RUN_MIN
    yield
    digest_mod.ENCODE_RUN_MIN_ENTRIES = saved


def old_frames(dm, first, lac, length, payloads):
    """What the client sent before: each entry formatted alone, then packed (wire.pack_batch)."""
    datas = []
    for i, p in enumerate(payloads):
        length += len(p)
        datas.append(dm.encode(first + i, lac, length, p))
    return wire.pack_batch(datas)


@given(st.sampled_from(DIGEST_TYPES), ids, st.integers(0, 2**40), st.integers(-1, 2**40),
       st.integers(0, 2**40), st.lists(st.binary(max_size=300), max_size=80))
def test_encode_many_sends_the_same_bytes_as_entry_by_entry(digest, ledger_id, first, lac,
                                                            length, payloads):
    dm = DigestManager(ledger_id, digest, b"pw")
    datas, lengths = dm.encode_many(first, lac, length, payloads)
    assert wire.pack_batch(datas) == old_frames(dm, first, lac, length, payloads)
    assert lengths == (np.cumsum([len(p) for p in payloads], dtype=np.int64) + length).tolist()
    if isinstance(datas, wire.EntryBatch):
        assert (datas.lengths_frame(), bytes(datas.data_frame())) == \
            old_frames(dm, first, lac, length, payloads)
    assert [dm.decode(d).data for d in datas] == payloads


@given(st.sampled_from(["crc32", "crc32c", "dummy"]),
       st.lists(st.binary(max_size=40), min_size=RUN_MIN,
                max_size=60), st.data())
def test_an_entry_batch_reads_slices_and_changes_like_a_list(digest, payloads, data):
    dm = DigestManager(3, digest, b"pw")
    batch, _ = dm.encode_many(10, 9, 0, payloads)
    assert isinstance(batch, wire.EntryBatch) and batch.packed
    want = [dm.encode(10 + i, 9, sum(map(len, payloads[:i + 1])), p) for i, p in enumerate(payloads)]
    assert batch == want and list(batch) == want and len(batch) == len(want)
    lo = data.draw(st.integers(0, len(want)))
    hi = data.draw(st.integers(lo, len(want)))
    part = batch[lo:hi]
    assert isinstance(part, wire.EntryBatch) and list(part) == want[lo:hi]
    assert wire.pack_batch(part) == wire.pack_batch(want[lo:hi])
    assert wire.EntryBatch.concat([batch[:lo], batch[lo:]]) == want
    i = data.draw(st.integers(0, len(want) - 1))
    batch[i] = b"changed"
    want[i] = b"changed"
    assert not batch.packed and batch == want
    assert wire.pack_batch(batch) == wire.pack_batch(want)


def test_header_crc_tables_give_the_crc_of_each_header():
    for kind, crc in (("crc32", digest_mod.zlib.crc32), ("crc32c", digest_mod._crc32c.crc32c)):
        dm = DigestManager(2**62 + 5, kind, b"")
        payloads = [b""] * 40
        batch, _ = dm.encode_many(2**50, 2**45, 2**61, payloads)
        for raw in batch:
            assert wire.DIGEST_SIZES[kind] == 8
            assert int.from_bytes(raw[32:40], "big") == crc(raw[:32])
