"""Read pacing: how many reply bytes a client asks of one bookie at once, and how a READ the
bookie refused as too many is retried (issue 21, defect 5).  Plain code; the I/O thread
(``client/io.py``) calls it around each READ it sends and each answer it takes.

Theory of operation
-------------------
A bookie refuses a connection's READs with TOO_MANY_REQUESTS once ``maxReadReplyBytesPerConnection``
(64 MiB by default) of its replies to that connection are unread.  A client issuing many reads
at once (thirty ``read_entries_async`` of 1 MiB entries) would trip it on its own, so:

* **Pacing.** Each READ is charged the reply it can bring: its entry count times the entry size
  its bookie's answers showed lately (the largest average per answer, decaying by 1/8 per
  answer towards smaller ones; the full ``MAX_READ_BYTES`` before any answer), at most
  ``MAX_READ_BYTES`` (a bookie never answers more).  At most ``READ_BYTES_IN_FLIGHT_PER_BOOKIE``
  (half the bookie's default cap) is charged to one bookie at a time; a READ past it is held,
  in order, until answers give charge back.  One READ is always let through, so a READ whose
  charge alone is over the budget still goes.
* **Retry.** A READ answered TOO_MANY_REQUESTS all the same (a bookie configured lower, other
  clients sharing the connection's budget) is sent again after a back-off of 5 ms doubling up
  to 0.5 s, for as long as ``retry_s`` (the client's ``operationTimeout``) has not passed since
  its first refusal; only then does its operation see the refusal.

Cost on the hot path: a dictionary look-up, a multiplication and one comparison per READ sent,
a subtraction per answer.
"""

from __future__ import annotations

import collections

from bookie.wire import MAX_READ_BYTES

READ_BYTES_IN_FLIGHT_PER_BOOKIE = 32 * 1024 * 1024
BUSY_FIRST_BACKOFF_S, BUSY_MAX_BACKOFF_S = 0.005, 0.5


class BookiePace:
    """One bookie's READs in flight: the bytes charged, the entry size its answers showed, and
    the READs held until answers free room."""

    __slots__ = ("in_flight_bytes", "entry_bytes", "learned", "waiting")

    def __init__(self):
        self.in_flight_bytes = 0
        self.entry_bytes = MAX_READ_BYTES  # unknown until an answer shows it
        self.learned = False
        self.waiting: collections.deque = collections.deque()  # items held, in order


class ReadPacer:
    """The pacing of every bookie of one client (theory of operation).

    Args:
        budget_bytes: reply bytes charged to one bookie at most at a time.
        retry_s: how long after its first refusal a READ refused TOO_MANY_REQUESTS is retried.
    """

    def __init__(self, budget_bytes: int = READ_BYTES_IN_FLIGHT_PER_BOOKIE,
                 retry_s: float = 60.0):
        self.budget_bytes = budget_bytes
        self.retry_s = retry_s
        self.bookies: dict[str, BookiePace] = {}

    def admit(self, bookie: str, max_count: int) -> int:
        """The charge of a READ of ``max_count`` entries to ``bookie`` if it may go now
        (charged), else 0 (the caller holds it with ``hold``)."""
        pace = self.bookies.get(bookie)
        if pace is None:
            pace = self.bookies[bookie] = BookiePace()
        charge = max_count * pace.entry_bytes
        if charge > MAX_READ_BYTES:
            charge = MAX_READ_BYTES
        if pace.in_flight_bytes + charge > self.budget_bytes and pace.in_flight_bytes:
            return 0
        pace.in_flight_bytes += charge
        return charge

    def hold(self, bookie: str, item) -> None:
        """Keep ``item`` until ``release`` lets it go: a tuple of the operation's driver (an
        object with ``over``: true once nothing it sends matters), the READ's ``max_count``,
        and what the caller needs to send it."""
        self.bookies[bookie].waiting.append(item)

    def release(self, bookie: str, charge: int) -> list:
        """A READ charged ``charge`` left flight (answered, timed out, failed to send).
        Returns ``[(item, charge)]``: the held items that may go now, charged, in order
        (items whose operation is over are dropped)."""
        pace = self.bookies[bookie]
        pace.in_flight_bytes -= charge
        out = []
        waiting = pace.waiting
        while waiting:
            item = waiting[0]
            if item[0].over:
                waiting.popleft()
                continue
            charge = min(item[1] * pace.entry_bytes, MAX_READ_BYTES)
            if pace.in_flight_bytes and pace.in_flight_bytes + charge > self.budget_bytes:
                break
            waiting.popleft()
            pace.in_flight_bytes += charge
            out.append((item, charge))
        return out

    def learn(self, bookie: str, frames) -> None:
        """An answer to a READ from ``bookie``: its frames if OK (header, the entries' lengths
        as 4-byte integers, their data), else None (nothing to learn)."""
        pace = self.bookies.get(bookie)
        entries = len(frames[1]) // 4 if frames is not None and len(frames) > 2 else 0
        if pace is None or entries <= 0:
            return
        avg = len(frames[2]) // entries + 1
        if avg >= pace.entry_bytes or not pace.learned:
            pace.entry_bytes, pace.learned = avg, True
        else:
            pace.entry_bytes = (pace.entry_bytes * 7 + avg) // 8

    def retry_delay(self, first_refused_s: float, refusals: int, now_s: float) -> float | None:
        """The back-off before sending again a READ refused ``refusals`` times before (the
        first at ``first_refused_s``); None once ``retry_s`` has passed: give up."""
        if now_s - first_refused_s >= self.retry_s:
            return None
        return min(BUSY_MAX_BACKOFF_S, BUSY_FIRST_BACKOFF_S * (1 << min(refusals, 16)))
