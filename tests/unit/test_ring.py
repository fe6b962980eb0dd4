"""The shared-memory ring between the add worker and the journal worker, wrapped many times.

A producer (the add worker's part) places records of random sizes, in one to three parts, only
while they fit (``WRITE + size - DURABLE <= capacity``); a consumer (the journal's part) on a
second mapping of the same file reads the bytes between its cursor and WRITE, any amount at a
time, and publishes DURABLE.  Everything comes out byte for byte, in order, and the cursors
never pass each other.
"""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie.storage.ring import DURABLE, WRITE, Ring


def _split(record: bytes, n_parts: int, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.randint(0, len(record)) for _ in range(n_parts - 1))
    bounds = [0, *cuts, len(record)]
    return [record[a:b] for a, b in zip(bounds, bounds[1:])]


def _check_cursors(ring: Ring) -> None:
    write, durable = ring.get(WRITE), ring.get(DURABLE)
    assert durable <= write <= durable + ring.capacity
    assert ring.free_bytes() == ring.capacity - (write - durable)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(capacity=st.integers(8, 300),
       base=st.one_of(st.integers(0, 1000), st.integers(0, 1 << 50)),
       sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12),
       reads=st.lists(st.integers(1, 500), min_size=1, max_size=12),
       seed=st.integers(0, 2**32))
def test_records_wrapped_many_times_come_out_byte_for_byte(tmp_path_factory, capacity, base,
                                                           sizes, reads, seed):
    rng = random.Random(seed)
    path = str(tmp_path_factory.mktemp("ring") / "ring")
    producer = Ring.create(path, capacity)
    consumer = Ring.attach(path)
    try:
        assert consumer.capacity == capacity
        for word in (WRITE, DURABLE):  # positions are logical: they start where the journal is
            producer.set(word, base)
        placed = bytearray()  # every byte placed, in order
        consumed = bytearray()
        i = j = 0
        while len(consumed) < 10 * capacity:
            size = 1 + (sizes[i % len(sizes)] - 1) % capacity
            # Place while the next record fits; read when it does not, or on a whim.
            if producer.free_bytes() >= size and rng.random() < 0.7:
                record = rng.randbytes(size)
                start = producer.get(WRITE)
                end = producer.put(start, _split(record, rng.randint(1, 3), rng))
                assert end == start + size
                producer.set(WRITE, end)  # data first, then the cursor
                placed += record
                i += 1
            else:
                write = consumer.get(WRITE)  # the cursor first, then the data up to it
                durable = consumer.get(DURABLE)
                upto = min(write, durable + reads[j % len(reads)])
                got = b"".join(bytes(s) for s in consumer.slices(durable, upto))
                assert len(got) == upto - durable
                consumed += got
                consumer.set(DURABLE, upto)
                j += 1
            _check_cursors(producer)
            _check_cursors(consumer)
            assert consumed == placed[:len(consumed)]
        assert producer.get(WRITE) == base + len(placed)
        assert producer.get(DURABLE) == base + len(consumed)
    finally:
        consumer.close()
        producer.close()


def test_a_record_as_large_as_the_ring_fits_only_when_the_ring_is_empty(tmp_path):
    ring = Ring.create(str(tmp_path / "ring"), 64)
    try:
        ring.set(WRITE, 1000)
        ring.set(DURABLE, 1000)
        assert ring.free_bytes() == 64
        end = ring.put(1000, [b"a" * 30, b"b" * 34])  # starts at 1000 % 64 = 40: wraps
        ring.set(WRITE, end)
        assert ring.free_bytes() == 0
        assert [len(s) for s in ring.slices(1000, end)] == [24, 40]
        assert b"".join(bytes(s) for s in ring.slices(1000, end)) == b"a" * 30 + b"b" * 34
        ring.set(DURABLE, end)
        assert ring.free_bytes() == 64
    finally:
        ring.close()


@pytest.mark.parametrize("start, end", [(5, 5), (9, 3)])
def test_an_empty_or_backward_range_has_no_slices(tmp_path, start, end):
    ring = Ring.create(str(tmp_path / "ring"), 16)
    try:
        assert ring.slices(start, end) == []
    finally:
        ring.close()
