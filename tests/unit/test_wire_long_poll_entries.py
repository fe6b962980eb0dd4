"""The long poll that asks for entries (WITH_ENTRIES, issue 42 item 1): its flag rules, its
body both ways (trimmed to the bookie's limits, never refused), and the answer's frames check."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from bookie import wire
from bookie.wire import Bits, Op, ProtocolError


def test_with_entries_is_allowed_only_beside_a_long_poll_on_read_lac():
    wire.check_request_flags(Op.READ_LAC, Bits.LONG_POLL | Bits.WITH_ENTRIES)
    wire.check_request_flags(Op.READ_LAC, Bits.LONG_POLL | Bits.WITH_ENTRIES | Bits.FENCE)
    for op, flags in [(Op.READ_LAC, Bits.WITH_ENTRIES), (Op.READ_LAC, Bits.WITH_ENTRIES | Bits.FENCE),
                      (Op.READ, Bits.WITH_ENTRIES), (Op.ADD, Bits.WITH_ENTRIES)]:
        with pytest.raises(ProtocolError):
            wire.check_request_flags(op, flags)


def test_a_plain_long_poll_is_the_twelve_byte_body_as_before():
    flags, body = wire.long_poll_request(41, 500)
    assert flags == Bits.LONG_POLL and body == wire.LONG_POLL_BODY.pack(41, 500) and len(body) == 12
    assert wire.unpack_long_poll_body(flags, body) == (41, 500, 0, 0)


@given(previous=st.integers(-2**63, 2**63 - 1), timeout_ms=st.integers(0, 2**32 - 1),
       max_entries=st.integers(1, 2**40), max_bytes=st.integers(-5, 2**40))
def test_the_entries_body_round_trips_trimmed_to_the_limits(previous, timeout_ms, max_entries, max_bytes):
    flags, body = wire.long_poll_request(previous, timeout_ms, max_entries, max_bytes)
    assert flags == Bits.LONG_POLL | Bits.WITH_ENTRIES and len(body) == 20
    wire.check_request_flags(Op.READ_LAC, flags)
    got = wire.unpack_long_poll_body(flags, body)
    assert got == (previous, timeout_ms, min(max_entries, wire.MAX_BATCH),
                   min(max(max_bytes, 0), wire.MAX_READ_BYTES))


def test_more_than_the_limits_is_trimmed_not_refused():
    body = wire.LONG_POLL_ENTRIES_BODY.pack(-1, 1000, 2**32 - 1, 2**32 - 1)
    assert wire.unpack_long_poll_body(Bits.LONG_POLL | Bits.WITH_ENTRIES, body) == \
        (-1, 1000, wire.MAX_BATCH, wire.MAX_READ_BYTES)


@pytest.mark.parametrize("flags, size", [(Bits.LONG_POLL, 20), (Bits.LONG_POLL, 0),
                                         (Bits.LONG_POLL | Bits.WITH_ENTRIES, 12),
                                         (Bits.LONG_POLL | Bits.WITH_ENTRIES, 21)])
def test_a_body_of_the_wrong_size_for_its_flags_is_refused(flags, size):
    with pytest.raises(ProtocolError):
        wire.unpack_long_poll_body(flags, b"\0" * size)


def test_entry_frames_must_add_up():
    lengths = np.array([40, 50], dtype=wire.LENGTHS_DTYPE).tobytes()
    wire.check_entry_frames(lengths, 90)
    wire.check_entry_frames(b"", 0)
    for frame, n in [(lengths, 89), (lengths[:7], 90), (b"", 1)]:
        with pytest.raises(ProtocolError):
            wire.check_entry_frames(frame, n)
