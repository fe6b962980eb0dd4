"""The benchmarks' latency histogram against exact figures of known data."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.bench.histogram import MAX_TRACKABLE, Histogram


def exact_percentile(values, p):
    """Nearest rank: the smallest recorded value with at least p% of the values at or below."""
    s = sorted(values)
    rank = max(math.ceil(round(p * len(s) / 100, 6)), 1)
    return s[rank - 1]


def within_precision(got, exact, digits=3):
    return exact <= got <= exact + exact * 10**-digits


def test_small_values_are_exact():
    h = Histogram()
    h.record_many(np.arange(1, 2001))
    for p in (0, 1, 50, 90, 99, 99.9, 100):
        assert h.percentile(p) == exact_percentile(range(1, 2001), p)
    assert h.count == 2000 and h.max == 2000 and h.min == 1
    assert h.mean == pytest.approx(1000.5)


def test_percentiles_of_a_known_distribution():
    h = Histogram()
    values = [1_000_000] * 90 + [5_000_000] * 9 + [40_000_000]  # 1 ms x90, 5 ms x9, 40 ms
    h.record_many(values)
    p50, p90, p95, p99, p100 = h.percentiles([50, 90, 95, 99, 100])
    assert within_precision(p50, 1_000_000) and within_precision(p90, 1_000_000)
    assert within_precision(p95, 5_000_000) and within_precision(p99, 5_000_000)
    assert p100 == h.max == 40_000_000


def test_ninety_nine_point_nine_of_a_thousand_is_rank_999():
    h = Histogram()
    h.record_many(np.arange(1, 1001) * 1000)
    assert within_precision(h.percentile(99.9), 999_000)


def test_record_with_count_equals_repeated_records():
    a, b = Histogram(), Histogram()
    a.record(123_456, count=7)
    for _ in range(7):
        b.record(123_456)
    assert np.array_equal(a.counts, b.counts) and a.count == b.count == 7
    assert a.sum == b.sum


def test_record_many_with_counts():
    a, b = Histogram(), Histogram()
    a.record_many([10, 2_000_000, 30], counts=[2, 0, 3])
    b.record_many([10, 10, 30, 30, 30])
    assert np.array_equal(a.counts, b.counts) and a.max == 30 and a.count == 5


def test_values_above_the_range_are_clamped_and_counted():
    h = Histogram(highest_trackable=10_000)
    h.record(50_000)
    h.record_many([20_000, 5])
    assert h.clamped == 2 and h.max == 10_000 and h.count == 3


def test_bad_input_is_refused():
    h = Histogram()
    with pytest.raises(ValueError):
        h.record(-1)
    with pytest.raises(ValueError):
        h.record_many([1, -5])
    with pytest.raises(ValueError):
        h.percentile(101)
    with pytest.raises(ValueError):
        Histogram(significant_digits=6)
    with pytest.raises(ValueError):
        Histogram(highest_trackable=MAX_TRACKABLE + 1)
    with pytest.raises(ValueError):
        Histogram(significant_digits=2).merge(Histogram())


def test_empty_histogram_reads_zero():
    h = Histogram()
    assert h.percentiles([50, 99]) == [0, 0] and h.max == 0 and h.min == 0 and h.mean == 0


def test_merge_equals_recording_everything_in_one():
    rng = np.random.default_rng(7)
    x, y = rng.integers(0, 10**9, 5000), rng.integers(0, 10**6, 3000)
    a, b, both = Histogram(), Histogram(), Histogram()
    a.record_many(x)
    b.record_many(y)
    both.record_many(np.concatenate([x, y]))
    a.merge(b)
    assert np.array_equal(a.counts, both.counts)
    assert (a.count, a.max, a.min, a.sum) == (both.count, both.max, both.min, both.sum)


def test_coordinated_omission_correction_adds_the_hidden_samples():
    # HdrHistogram's example: at an expected interval of 10, a 100 stalls 9 more samples.
    h = Histogram()
    h.record_corrected(100, 10)
    assert h.count == 10
    assert sorted(np.repeat(np.arange(len(h.counts)), h.counts).tolist()) == \
        [h._index_of(v) for v in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)]
    fast = Histogram()
    fast.record_corrected(9, 10)  # faster than the interval: nothing hidden
    assert fast.count == 1


def test_coordinated_omission_correction_of_a_long_stall_is_chunked():
    h = Histogram()
    h.record_corrected(3_000_000_000, 1_000)  # 3 s stall at 1 us: 3 million samples
    assert h.count == 3_000_000
    assert within_precision(h.percentile(50), 1_500_000_000)


def reference_corrected(values, interval):
    out = []
    for v in values:
        out.append(v)
        missing = v - interval
        while interval > 0 and missing >= interval:
            out.append(missing)
            missing -= interval
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=40), st.integers(0, 700))
def test_corrected_recording_matches_hdrhistogram_loop(values, interval):
    h = Histogram()
    h.record_many_corrected(values, interval)
    ref = Histogram()
    ref.record_many(reference_corrected(values, interval))
    assert np.array_equal(h.counts, ref.counts) and h.count == ref.count


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=300),
       st.sampled_from([1, 2, 3, 4]),
       st.lists(st.floats(0, 100), min_size=1, max_size=8))
def test_percentiles_are_exact_within_the_precision(values, digits, ps):
    h = Histogram(significant_digits=digits)
    h.record_many(values)
    for p, got in zip(ps, h.percentiles(ps)):
        assert within_precision(got, exact_percentile(values, p), digits), (p, got)
    assert h.max == max(values) and h.count == len(values)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=100))
def test_scalar_and_array_recording_agree(values):
    a, b = Histogram(), Histogram()
    for v in values:
        a.record(v)
    b.record_many(values)
    assert np.array_equal(a.counts, b.counts) and a.sum == b.sum
