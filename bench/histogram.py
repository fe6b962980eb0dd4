"""A log-linear latency histogram with fixed relative precision (HdrHistogram's layout, in numpy).

Theory of operation
-------------------
Values are non-negative integers (the benchmarks record nanoseconds).  The value range is cut
into *buckets* that double in width; each bucket is cut into ``sub_bucket_count / 2`` equal
*sub-buckets* (bucket 0 has ``sub_bucket_count``), where ``sub_bucket_count`` is the smallest
power of two >= 2 * 10**significant_digits.  A value therefore shares its counter only with
values within a relative distance of 10**-significant_digits of it: every figure read back
(percentile, max) is exact to that many significant digits, whatever the range, with a fixed
memory cost (about 45,000 counters for 3 digits up to one hour in nanoseconds).  This is
HdrHistogram's index scheme (Gil Tene), so its numbers mean the same here:

    bucket(v)     = bit_length(v | sub_bucket_mask) - unit_magnitude - (half_magnitude + 1)
    sub_bucket(v) = v >> (bucket(v) + unit_magnitude)
    index(v)      = ((bucket + 1) << half_magnitude) + sub_bucket - half_count

A percentile p is the highest value equivalent to the recorded value of rank ceil(p% * count)
(the "nearest rank" definition), capped at the exact maximum; so it is never below the exact
percentile of the recorded data and exceeds it by at most 10**-significant_digits of it.

Coordinated omission: a closed-loop tester that waits for each answer before sending the next
request sends nothing while the system stalls, so a stall shows up as one slow sample instead of
all the requests that would have been waiting.  ``record_corrected(value, expected_interval)``
adds the samples an open-loop client would have seen (value - interval, value - 2*interval, ...
down to the interval), as HdrHistogram's recordValueWithExpectedInterval does.  Open-loop
(paced) benchmarks do better by measuring each latency from the request's *intended* start
time; they record plainly.
"""

from __future__ import annotations

import math

import numpy as np

# Values are turned into float64 to find their bit length at numpy speed; that is exact below
# 2**53, which is the largest value a histogram may track (104 days in nanoseconds).
MAX_TRACKABLE = (1 << 53) - 1

# Missing values synthesised by coordinated-omission correction are recorded in chunks of at
# most this many, so a long stall at a short interval costs time, never unbounded memory.
_CO_CHUNK = 1 << 20


class Histogram:
    """Counts of integer values with a fixed relative precision.

    Args:
        highest_trackable: largest value recorded as itself; larger values are recorded as this
            value and counted in ``clamped`` (a benchmark must not die on one huge stall).
        significant_digits: 1..5, the precision of every figure read back.
        lowest_discernible: values below this are indistinguishable from 0 (a power of two
            keeps the layout exact; it is rounded down to one).
    Raises:
        ValueError: a range or precision out of bounds.
    """

    def __init__(self, highest_trackable: int = 3_600 * 10**9, significant_digits: int = 3,
                 lowest_discernible: int = 1):
        if not 1 <= significant_digits <= 5:
            raise ValueError("significant_digits must be 1..5")
        if lowest_discernible < 1:
            raise ValueError("lowest_discernible must be >= 1")
        if not 2 * lowest_discernible <= highest_trackable <= MAX_TRACKABLE:
            raise ValueError(f"highest_trackable must be in [2 * lowest_discernible, {MAX_TRACKABLE}]")
        self.highest_trackable = int(highest_trackable)
        self.significant_digits = significant_digits
        self.lowest_discernible = int(lowest_discernible)
        self._unit_magnitude = int(math.floor(math.log2(lowest_discernible)))
        largest_single_unit = 2 * 10**significant_digits
        self._half_magnitude = max(int(math.ceil(math.log2(largest_single_unit))) - 1, 0)
        self._sub_bucket_count = 1 << (self._half_magnitude + 1)
        self._half_count = self._sub_bucket_count // 2
        self._sub_bucket_mask = (self._sub_bucket_count - 1) << self._unit_magnitude
        buckets = 1
        smallest_untrackable = self._sub_bucket_count << self._unit_magnitude
        while smallest_untrackable <= self.highest_trackable:
            smallest_untrackable <<= 1
            buckets += 1
        self._bucket_count = buckets
        self.counts = np.zeros((buckets + 1) * self._half_count, dtype=np.int64)
        self._highest_equivalent_cache: np.ndarray | None = None
        self.reset()

    # -- layout --------------------------------------------------------------------------------

    def _config(self) -> tuple[int, int, int]:
        return self.highest_trackable, self.significant_digits, self.lowest_discernible

    def _index_of(self, value: int) -> int:
        bucket = ((value | self._sub_bucket_mask).bit_length()
                  - self._unit_magnitude - self._half_magnitude - 1)
        sub_bucket = value >> (bucket + self._unit_magnitude)
        return ((bucket + 1) << self._half_magnitude) + sub_bucket - self._half_count

    def _indices_of(self, values: np.ndarray) -> np.ndarray:
        _, bit_length = np.frexp((values | self._sub_bucket_mask).astype(np.float64))
        bucket = bit_length.astype(np.int64) - self._unit_magnitude - self._half_magnitude - 1
        sub_bucket = values >> (bucket + self._unit_magnitude)
        return ((bucket + 1) << self._half_magnitude) + sub_bucket - self._half_count

    def _highest_equivalents(self) -> np.ndarray:
        """The highest value each counter stands for (computed once per histogram)."""
        if self._highest_equivalent_cache is None:
            index = np.arange(len(self.counts), dtype=np.int64)
            bucket = (index >> self._half_magnitude) - 1
            sub_bucket = (index & (self._half_count - 1)) + self._half_count
            first = bucket < 0
            sub_bucket[first] -= self._half_count
            bucket[first] = 0
            shift = bucket + self._unit_magnitude
            lowest = sub_bucket << shift
            self._highest_equivalent_cache = lowest + (np.int64(1) << shift) - 1
        return self._highest_equivalent_cache

    # -- recording -----------------------------------------------------------------------------

    def _check_value(self, value: int) -> int:
        if value < 0:
            raise ValueError(f"cannot record a negative value ({value})")
        if value > self.highest_trackable:
            self.clamped += 1
            return self.highest_trackable
        return value

    def record(self, value: int, count: int = 1) -> None:
        """Record ``count`` occurrences of one value.

        Raises:
            ValueError: a negative value or count.
        """
        if count < 0:
            raise ValueError("count must be >= 0")
        value = self._check_value(int(value))
        self.counts[self._index_of(value)] += count
        self.total += count
        if count:
            self.max_value = max(self.max_value, value)
            self.min_value = min(self.min_value, value)
            self.sum += value * count

    def record_many(self, values, counts=None) -> None:
        """Record an array of values at once (each ``counts[i]`` times when counts is given).

        Raises:
            ValueError: a negative value or count.
        """
        v = np.asarray(values, dtype=np.int64).reshape(-1)
        if v.size == 0:
            return
        if int(v.min()) < 0:
            raise ValueError(f"cannot record a negative value ({int(v.min())})")
        over = v > self.highest_trackable
        if over.any():
            self.clamped += int(over.sum())
            v = np.minimum(v, self.highest_trackable)
        if counts is None:
            c = None
            n = int(v.size)
            self.sum += int(v.sum())
            nonzero = v
        else:
            c = np.asarray(counts, dtype=np.int64).reshape(-1)
            if c.shape != v.shape:
                raise ValueError("values and counts differ in length")
            if int(c.min()) < 0:
                raise ValueError("counts must be >= 0")
            n = int(c.sum())
            self.sum += int((v * c).sum())
            nonzero = v[c > 0]
        binned = np.bincount(self._indices_of(v), weights=c, minlength=len(self.counts))
        self.counts += binned.astype(np.int64)
        self.total += n
        if nonzero.size:
            self.max_value = max(self.max_value, int(nonzero.max()))
            self.min_value = min(self.min_value, int(nonzero.min()))

    def record_corrected(self, value: int, expected_interval: int) -> None:
        """Record a value seen by a closed-loop tester that meant to send every
        ``expected_interval``, with the samples coordinated omission hid (see the module doc)."""
        self.record_many_corrected(np.array([value], dtype=np.int64), expected_interval)

    def record_many_corrected(self, values, expected_interval: int) -> None:
        """``record_corrected`` for an array of values (same counts as one call per value)."""
        v = np.asarray(values, dtype=np.int64).reshape(-1)
        self.record_many(v)
        interval = int(expected_interval)
        if interval <= 0 or v.size == 0:
            return
        v = np.minimum(v, self.highest_trackable)
        # Value x hides x - j*interval for j = 1 .. floor(x / interval) - 1.
        missing = np.maximum(v // interval - 1, 0)
        keep = missing > 0
        v, missing = v[keep], missing[keep]
        start = 0
        while start < v.size:
            # Take as many values as fit in one chunk (at least one).
            ends = np.cumsum(missing[start:])
            stop = start + max(int(np.searchsorted(ends, _CO_CHUNK, side="right")), 1)
            if stop == start + 1 and missing[start] > _CO_CHUNK:
                x, k = int(v[start]), int(missing[start])
                for j0 in range(1, k + 1, _CO_CHUNK):
                    j = np.arange(j0, min(j0 + _CO_CHUNK, k + 1), dtype=np.int64)
                    self.record_many(x - j * interval)
            else:
                vs, ks = v[start:stop], missing[start:stop]
                firsts = np.repeat(np.cumsum(ks) - ks, ks)
                j = np.arange(int(ks.sum()), dtype=np.int64) - firsts + 1
                self.record_many(np.repeat(vs, ks) - j * interval)
            start = stop

    def merge(self, other: "Histogram") -> None:
        """Add every count of ``other`` (same layout) into this histogram.

        Raises:
            ValueError: the two histograms have different ranges or precisions.
        """
        if other._config() != self._config():
            raise ValueError("cannot merge histograms of different range or precision")
        self.counts += other.counts
        self.total += other.total
        self.sum += other.sum
        self.clamped += other.clamped
        if other.total:
            self.max_value = max(self.max_value, other.max_value)
            self.min_value = min(self.min_value, other.min_value)

    def reset(self) -> None:
        self.counts[:] = 0
        self.total = 0
        self.sum = 0
        self.clamped = 0
        self.max_value = 0
        self.min_value = MAX_TRACKABLE

    def copy(self) -> "Histogram":
        h = Histogram(*self._config())
        h.merge(self)
        return h

    # -- reading -------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self.total

    @property
    def max(self) -> int:
        """The largest value recorded, exactly (0 when empty)."""
        return self.max_value if self.total else 0

    @property
    def min(self) -> int:
        return self.min_value if self.total else 0

    @property
    def mean(self) -> float:
        return self.sum / self.total if self.total else 0.0

    def percentiles(self, ps) -> list[int]:
        """Values at percentiles ``ps`` (each 0..100), by the nearest-rank definition.

        Returns:
            one value per p: never below the exact percentile of the recorded values and above
            it by at most 10**-significant_digits of it; 0 for an empty histogram.
        """
        ps = np.asarray(ps, dtype=np.float64).reshape(-1)
        if ((ps < 0) | (ps > 100)).any():
            raise ValueError("percentiles must be within 0..100")
        if self.total == 0:
            return [0] * len(ps)
        # Rounded before the ceiling so that 99.9% of 1000 is rank 999, not 1000 (float noise).
        ranks = np.maximum(np.ceil(np.round(ps * self.total / 100.0, 6)), 1).astype(np.int64)
        cumulative = np.cumsum(self.counts)
        index = np.searchsorted(cumulative, ranks, side="left")
        values = np.minimum(self._highest_equivalents()[index], self.max_value)
        return [int(x) for x in values]

    def percentile(self, p: float) -> int:
        return self.percentiles([p])[0]
