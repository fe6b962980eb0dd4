"""The wire codec: round trips, and every malformed header refused with the right status."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bookie import wire
from bookie.wire import Op, ProtocolError, Status


@given(op=st.sampled_from(list(Op)), flags=st.integers(0, 0xFFFF), rid=st.integers(0, 2**64 - 1),
       ledger=st.integers(0, 2**63 - 1))
def test_header_round_trips(op, flags, rid, ledger):
    assert wire.unpack_header(wire.pack_header(op, flags, rid, ledger)) == (op, flags, rid, ledger)


@pytest.mark.parametrize("frame, status", [
    (b"", Status.BAD_REQUEST),
    (b"x" * 23, Status.BAD_REQUEST),
    (b"XX" + wire.pack_header(Op.ADD, 0, 1, 1)[2:], Status.BAD_REQUEST),
    (wire.HEADER.pack(b"BK", 9, Op.ADD, 0, 0, 1, 1), Status.BAD_VERSION),
    (wire.HEADER.pack(b"BK", 1, 77, 0, 0, 1, 1), Status.BAD_REQUEST),
    (wire.HEADER.pack(b"BK", 1, Op.ADD, 0, 0, 1, -5), Status.BAD_REQUEST),
])
def test_bad_headers_are_refused_with_a_status(frame, status):
    with pytest.raises(ProtocolError) as e:
        wire.unpack_header(frame)
    assert e.value.status == status


def test_flags_outside_an_op_are_refused():
    wire.check_request_flags(Op.ADD, wire.Flag.RECOVERY_ADD)
    with pytest.raises(ProtocolError):
        wire.check_request_flags(Op.ADD, wire.Flag.FENCE)
    with pytest.raises(ProtocolError):
        wire.check_request_flags(Op.READ, 0x80)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), min_size=1, max_size=40))
def test_batch_round_trip_and_vectorised_header_fields(items):
    entries = [wire.pack_entry(5, eid, eid - 1, 0, b"\0" * 8, payload) for eid, payload in items]
    lengths_frame, data = wire.pack_batch(entries)
    lengths, offsets = wire.batch_offsets(lengths_frame, len(data), 1 << 20)
    assert list(lengths) == [len(e) for e in entries]
    assert list(wire.batch_header_fields(data, offsets, 0)) == [5] * len(entries)
    assert list(wire.batch_header_fields(data, offsets, 1)) == [eid for eid, _ in items]
    assert [bytes(e) for e in wire.split_batch(lengths_frame, data)] == entries


@pytest.mark.parametrize("lengths, data_len, why", [
    ([], 0, "non-empty"),
    ([10], 10, "shorter than the 32-byte"),
    ([40, 40], 79, "add up"),
    ([2000], 2000, "maximum entry size"),
])
def test_bad_batches_are_refused(lengths, data_len, why):
    frame = np.array(lengths, dtype="<u4").tobytes()
    with pytest.raises(ProtocolError, match=why):
        wire.batch_offsets(frame, data_len, 1024)


def test_lengths_frame_must_be_whole_u32s():
    with pytest.raises(ProtocolError):
        wire.batch_offsets(b"\x01\x00\x00", 1, 1024)


@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=40), st.integers(0, 2**62))
def test_batch_ids_small_and_large_paths_agree(entry_ids, ledger):
    entries = [wire.pack_entry(ledger, eid, -1, 0, b"", b"p" * (eid % 7)) for eid in entry_ids]
    lengths_frame, data = wire.pack_batch(entries)
    _, offsets = wire.batch_offsets(lengths_frame, len(data), 1 << 20)
    ledgers, ids = wire.batch_ids(data, offsets)
    assert list(ids) == entry_ids and list(ledgers) == [ledger] * len(entry_ids)
    assert list(ids) == list(wire.batch_header_fields(data, offsets, 1))


@given(first=st.integers(0, 2**63 - 1), count=st.integers(1, 2**32 - 1),
       stride=st.integers(1, wire.MAX_STRIDE))
def test_read_bodies_round_trip_plain_and_striped(first, count, stride):
    flags, body = wire.read_request(first, count, stride)
    assert bool(flags & wire.Flag.STRIDE) == (stride != 1)
    wire.check_request_flags(Op.READ, flags)
    assert wire.unpack_read_body(flags, body) == (first, min(count, wire.MAX_BATCH), stride)


@pytest.mark.parametrize("flags, body", [
    (wire.Flag.STRIDE, wire.READ_BODY.pack(0, 1)),  # plain body with STRIDE
    (0, wire.READ_STRIDE_BODY.pack(0, 1, 3)),  # striped body without it
    (wire.Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 1, 0)),
    (wire.Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 1, wire.MAX_STRIDE + 1)),
    (wire.Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 0, 3)),
    (wire.Flag.STRIDE, wire.READ_STRIDE_BODY.pack(2**63, 1, 3)),
    (wire.Flag.STRIDE, b""),
])
def test_malformed_read_bodies_are_refused(flags, body):
    with pytest.raises(ProtocolError) as e:
        wire.unpack_read_body(flags, body)
    assert e.value.status == Status.BAD_REQUEST


def test_stride_is_a_read_flag_only():
    wire.check_request_flags(Op.READ, wire.Flag.STRIDE | wire.Flag.FENCE)
    for op in (Op.ADD, Op.READ_LAC, Op.WRITE_LAC):
        with pytest.raises(ProtocolError):
            wire.check_request_flags(op, wire.Flag.STRIDE)


def test_deferred_sync_is_a_plain_add_flag_and_force_ledger_takes_none():
    wire.check_request_flags(Op.ADD, wire.Flag.DEFERRED_SYNC)
    wire.check_request_flags(Op.FORCE_LEDGER, 0)
    for op, flags in ((Op.ADD, wire.Flag.DEFERRED_SYNC | wire.Flag.RECOVERY_ADD),
                      (Op.READ, wire.Flag.DEFERRED_SYNC), (Op.WRITE_LAC, wire.Flag.DEFERRED_SYNC),
                      (Op.FORCE_LEDGER, wire.Flag.DEFERRED_SYNC), (Op.ADD, 0x40)):
        with pytest.raises(wire.ProtocolError) as e:
            wire.check_request_flags(op, flags)
        assert "\n" not in str(e.value)
    assert wire.unpack_header(wire.pack_header(Op.FORCE_LEDGER, 0, 9, 3))[0] == Op.FORCE_LEDGER


@given(st.lists(st.integers(32, 5000), min_size=1, max_size=2 * wire.SMALL_BATCH))
def test_batch_offsets_of_few_and_many_entries_agree(lengths):
    """Under SMALL_BATCH entries the lengths are checked in plain Python, from it on with
    numpy: both give the lengths and the entries' start offsets."""
    frame = np.array(lengths, dtype="<u4").tobytes()
    got_lengths, got_offsets = wire.batch_offsets(frame, sum(lengths), 1 << 20)
    assert got_lengths.dtype == got_offsets.dtype == np.int64
    assert got_lengths.tolist() == lengths
    assert got_offsets.tolist() == (np.cumsum(lengths) - lengths).tolist()


@pytest.mark.parametrize("entries", [1, wire.SMALL_BATCH + 1])
@pytest.mark.parametrize("bad, data_delta, why", [
    (10, 0, "shorter than the 32-byte"),
    (40, -1, "add up"),
    (2000, 0, "maximum entry size"),
])
def test_a_bad_entry_is_refused_in_few_and_many(entries, bad, data_delta, why):
    lengths = [40] * (entries - 1) + [bad]
    frame = np.array(lengths, dtype="<u4").tobytes()
    with pytest.raises(ProtocolError, match=why):
        wire.batch_offsets(frame, sum(lengths) + data_delta, 1024)
