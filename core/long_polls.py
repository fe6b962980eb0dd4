"""The read worker's parked long polls: bounded in number, woken and expired without scans.

Theory of operation
-------------------
A READ_LAC with LONG_POLL whose ledger has not passed the client's ``previous`` LAC parks here
until the ledger's LAC passes it or its deadline comes.  Clients control how many polls arrive
and on which ledgers, so every step must cost O(log n) of the polls concerned, never a walk over
all parked polls (300k polls on one ledger made each wake-up a full scan, and expiry quadratic):

- ``_polls``: seq -> (ledger_id, previous, deadline, request), the live polls;
- per ledger, a heap of (previous, seq): a LAC ``lac`` wakes exactly the polls with
  ``previous < lac``, popped from the top;
- one heap of (deadline, seq) for expiry.

Removal from the heaps is lazy (an entry whose seq is no longer live is skipped when it surfaces);
each heap is rebuilt from the live polls once stale entries outnumber live ones, so memory stays
within a constant factor of ``limit``.  ``park`` refuses past ``limit``, and past ``per_key``
polls of one key (the worker's key is the client connection), and past ``per_principal`` polls
of one principal (``park``'s ``principal``: the client's enrolled key, or its host; see
``bookie.core.shares``), so one client cannot take every place, however many connections it
opens: the worker answers TOO_MANY_REQUESTS instead of parking.  Both counts are dictionaries
updated once per park and once per poll leaving: O(1).

A ledger this bookie holds nothing of yet (``on_nothing_held``): a writer creates a ledger in
the metadata store before its first add reaches a bookie, and an ensemble change names bookies
that hold nothing of it until the next add; a tailer polls exactly then.  Answering "no such
ledger" at once made the tailing loop spin (thousands of calls a second, each polling every
bookie and re-reading the metadata).  So such a poll parks when the store knows the ledger (the
worker asks it off its loop: ``bookie.workers.claims``), as it would on an empty ledger the bookie
holds: until an add moves the LAC past it, or its timeout.  An id the store does not know, or a
store that cannot be asked now (down, or past its lookup budget), is still answered at once;
while the store's answer is awaited the poll is parked, and the answer wakes it if it says no.
"""

from __future__ import annotations

import heapq
import itertools

from bookie.core.ledgers import Owner
from bookie.core.shares import Held

PARK, ANSWER, ASK = "park", "answer", "ask"


def on_nothing_held(store_says) -> str:
    """What a long poll does on a ledger this bookie holds nothing of (module docstring).

    Args:
        store_says: the metadata store's answer for the id as the worker knows it now: the
            ledger's key check (bytes) or an ``Owner``; None when not asked yet.
    Returns:
        PARK (the store knows the ledger), ASK (park, and ask the store: its answer wakes the
        poll if it says no), ANSWER (answer now: unknown id, store unavailable, or no store).
    """
    if store_says is None:
        return ASK
    if isinstance(store_says, (bytes, bytearray)) or store_says is Owner.NO_CHECK:
        return PARK
    return ANSWER


class LongPolls:
    def __init__(self, limit: int, per_key: int | None = None, key=None,
                 per_principal: int | None = None):
        self.limit = limit
        self.key = key or (lambda request: None)  # the key of a request (its connection)
        # live polls per key and per principal, counted only where there is a limit (None: none)
        self.per_key, self.per_principal = per_key, per_principal
        self._per_key, self._per_principal = Held(per_key), Held(per_principal)
        self._polls: dict[int, tuple] = {}  # seq -> (ledger_id, previous, deadline, request, principal)
        self._by_ledger: dict[int, list] = {}
        self._live_per_ledger: dict[int, int] = {}
        self._deadlines: list = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._polls)

    def waiting_on(self, ledger_id: int) -> bool:
        return ledger_id in self._live_per_ledger

    def full(self) -> bool:
        return len(self._polls) >= self.limit

    def park(self, ledger_id: int, previous: int, deadline: float, request, principal=None) -> bool:
        """Park a poll; False (nothing parked) when ``limit`` polls are parked already, or its
        key's ``per_key``, or its principal's ``per_principal`` (None: not counted)."""
        if self.full():
            return False
        counted = self.per_principal is not None and principal is not None
        if counted and self._per_principal.full(principal):
            return False
        if self.per_key is not None:
            k = self.key(request)
            if self._per_key.full(k):
                return False
            self._per_key.take(k)
        if counted:
            self._per_principal.take(principal)
        else:
            principal = None
        seq = next(self._seq)
        self._polls[seq] = (ledger_id, previous, deadline, request, principal)
        heapq.heappush(self._by_ledger.setdefault(ledger_id, []), (previous, seq))
        self._live_per_ledger[ledger_id] = self._live_per_ledger.get(ledger_id, 0) + 1
        heapq.heappush(self._deadlines, (deadline, seq))
        if len(self._deadlines) > 2 * len(self._polls) + 1024:
            self._deadlines = [(p[2], s) for s, p in self._polls.items()]
            heapq.heapify(self._deadlines)
        return True

    def ledger_moved(self, ledger_id: int, lac: int | None) -> list:
        """The requests to answer now that the ledger's LAC is ``lac`` (None: it is gone, all of
        its polls are answered)."""
        heap = self._by_ledger.get(ledger_id)
        out = []
        while heap and (lac is None or heap[0][0] < lac):
            _, seq = heapq.heappop(heap)
            poll = self._polls.pop(seq, None)
            if poll is not None:
                out.append(poll[3])
                self._forget(ledger_id, poll, compact=False)  # popping: this heap shrinks anyway
        return out

    def drop_where(self, pred) -> int:
        """Remove the polls whose request ``pred`` accepts (their connection was shut down:
        nobody is left to answer).  A walk over every poll: for rare events only."""
        gone = [seq for seq, poll in self._polls.items() if pred(poll[3])]
        for seq in gone:
            poll = self._polls.pop(seq)
            self._forget(poll[0], poll)
        return len(gone)

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][1] not in self._polls:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def expired(self, now: float) -> list:
        """The requests whose deadline has come, removed."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, seq = heapq.heappop(self._deadlines)
            poll = self._polls.pop(seq, None)
            if poll is None:
                continue  # answered already
            out.append(poll[3])
            self._forget(poll[0], poll)
        return out

    def _forget(self, ledger_id: int, poll: tuple, compact: bool = True) -> None:
        """One live poll of the ledger left ``_polls``; count it out of its key and principal,
        drop or compact its ledger's heap."""
        if self.per_key is not None:
            self._per_key.give(self.key(poll[3]))
        if poll[4] is not None:
            self._per_principal.give(poll[4])
        left = self._live_per_ledger[ledger_id] - 1
        if left == 0:
            del self._live_per_ledger[ledger_id], self._by_ledger[ledger_id]
            return
        self._live_per_ledger[ledger_id] = left
        heap = self._by_ledger[ledger_id]
        if compact and len(heap) > 2 * left + 64:  # mostly expired entries: keep the live ones
            live = [e for e in heap if e[1] in self._polls]
            heapq.heapify(live)
            self._by_ledger[ledger_id] = live

    def ledgers(self) -> list[int]:
        """The ledgers with polls parked (for a re-check of every one: ``WakeNews``)."""
        return list(self._live_per_ledger)


# -- the add worker's news, only while a poll is parked -------------------------------------------
OFF, ARMING, ON = 0, 1, 2
# read worker -> add worker on the control socket: [b"P1", u64 number] / [b"P0"]; add worker ->
# read worker: [b"P", u64 number]: it tells from now on (the number of the SUBSCRIBE taken)
SUBSCRIBE, UNSUBSCRIBE, SUBSCRIBED = b"P1", b"P0", b"P"


class WakeNews:
    """Whether the add worker tells the read worker which ledgers moved (issue 34): only while
    long polls are parked, so a lone add with no tailer costs the read worker nothing.  Pure:
    the read worker feeds it the number of parked polls and the clock; it says what to send.

    Protocol.  The read worker sends SUBSCRIBE on its control socket when a poll parks and it
    is not subscribed; the add worker, on taking it, turns its news on and answers SUBSCRIBED;
    the read worker sends UNSUBSCRIBE once no poll has been parked for ``linger_s`` (a tailer's
    next poll comes within it, so a steady tailer keeps one subscription).  The add worker
    starts with its news on (a worker started anew tells too much, never too little), and an
    unsubscribed read worker that still hears news says UNSUBSCRIBE again (at most once per
    ``linger_s``); a SUBSCRIBE not answered within ``linger_s`` is sent again (the add worker
    restarted and lost it).  Each SUBSCRIBE carries a number, echoed by SUBSCRIBED: only the
    answer to the latest one counts (an answer to an older one may have been sent before an
    UNSUBSCRIBE the add worker took after it: news off again).

    Why no wake-up is missed (the ordering argument).  A poll parks on a LAC read before it
    parked.  A commit C of the add worker after that read is either (a) made while the news is
    on: the add worker publishes the ledger after C (it reads its flag after each commit, in
    its own loop), and the read worker wakes the poll with a fresh read; or (b) made while the
    news is off: then C precedes, in the add worker's loop, its taking of the SUBSCRIBE this
    poll's parking caused (or a later one), and so precedes the SUBSCRIBED it sends; on taking
    SUBSCRIBED (state ARMING -> ON) the read worker re-reads the LAC of *every* ledger with
    polls parked (``recheck``), in a read transaction begun after that answer arrived, which
    therefore sees C.  While ON, polls park as before and (a) covers them.  Until SUBSCRIBED
    arrives, a poll that parks only waits for that re-check (or the news, or its timeout)."""

    def __init__(self, linger_s: float = 1.0):
        self.linger_s = linger_s
        self.state = OFF
        self.asked_at = float("-inf")  # when SUBSCRIBE / UNSUBSCRIBE last went
        self.empty_since: float | None = None  # since when no poll is parked (while subscribed)
        self.number = 0  # of the latest SUBSCRIBE

    def tick(self, parked: int, now: float) -> bytes | None:
        """Once per loop turn, after the turn's polls parked and left: the message to send
        now (SUBSCRIBE, UNSUBSCRIBE) or None."""
        if parked:
            self.empty_since = None
            if self.state == OFF or (self.state == ARMING and now - self.asked_at >= self.linger_s):
                self.state, self.asked_at = ARMING, now
                self.number += 1
                return SUBSCRIBE
            return None
        if self.state == OFF:
            return None
        if self.empty_since is None:
            self.empty_since = now
            return None
        if now - self.empty_since >= self.linger_s:
            self.state, self.asked_at, self.empty_since = OFF, now, None
            return UNSUBSCRIBE
        return None

    def subscribed(self, number: int) -> bool:
        """SUBSCRIBED ``number`` came: True when the read worker must re-check every parked poll
        now (it was ARMING, and this answers its latest SUBSCRIBE); any other changes nothing."""
        if self.state != ARMING or number != self.number:
            return False
        self.state = ON
        return True

    def news_unasked(self, now: float) -> bytes | None:
        """News came while not subscribed: UNSUBSCRIBE (at most once per ``linger_s``)."""
        if self.state != OFF or now - self.asked_at < self.linger_s:
            return None
        self.asked_at = now
        return UNSUBSCRIBE
