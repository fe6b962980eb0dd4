"""core/long_polls.py WakeNews: the add worker tells the read worker which ledgers moved only
while polls are parked, and no wake-up is ever missed.

A model of the two workers over any interleaving: commits, polls parking (on the LAC as read
when they park), the control channel's messages each way and the news channel delivered in any
order between the channels (each channel in its own order), the clock, and add worker restarts
(news on again, messages in flight to it lost).  Checked: once the messages settle, no parked
poll is behind the LAC (it was answered by news or by the re-check), and with no poll parked
for ``linger_s`` the news is off (at the latest after one more piece of news: a restarted add
worker starts with it on)."""

from __future__ import annotations

import collections

from hypothesis import example, given, settings, strategies as st

from bookie.core.long_polls import OFF, ON, SUBSCRIBE, UNSUBSCRIBE, WakeNews

step = st.one_of(
    st.just(("commit",)), st.just(("park",)), st.just(("to_add",)), st.just(("news",)),
    st.just(("subscribed",)), st.just(("tick",)), st.just(("restart",)),
    st.tuples(st.just("sleep"), st.floats(0.0, 1.5)),
)


class Model:
    def __init__(self):
        self.lac = 0  # committed
        self.news_on = True  # the add worker's
        self.to_add: collections.deque = collections.deque()  # read -> add (control)
        self.subscribed_q: collections.deque = collections.deque()  # add -> read (control)
        self.news_q: collections.deque = collections.deque()  # add -> read (news)
        self.polls: list[int] = []  # each: the LAC it parked on
        self.rw = WakeNews(linger_s=1.0)
        self.now = 0.0

    def send(self, message):
        if message is not None:
            self.to_add.append((message, self.rw.number))

    def wake(self):  # a fresh read of the LAC answers every poll behind it
        self.polls = [p for p in self.polls if p >= self.lac]

    def apply(self, s):
        kind = s[0]
        if kind == "commit":
            self.lac += 1
            if self.news_on:
                self.news_q.append(self.lac)
        elif kind == "park":
            self.polls.append(self.lac)  # parks on the LAC read now
        elif kind == "to_add" and self.to_add:
            message, number = self.to_add.popleft()
            self.news_on = message == SUBSCRIBE
            if self.news_on:
                self.subscribed_q.append(number)
        elif kind == "news" and self.news_q:
            self.news_q.popleft()
            self.wake()
            if self.rw.state == OFF:
                self.send(self.rw.news_unasked(self.now))
        elif kind == "subscribed" and self.subscribed_q:
            if self.rw.subscribed(self.subscribed_q.popleft()):
                self.wake()  # recheck_polls
        elif kind == "tick":
            self.send(self.rw.tick(len(self.polls), self.now))
        elif kind == "restart":
            self.news_on = True
            self.to_add.clear()
        elif kind == "sleep":
            self.now += s[1]

    def settle(self):
        for _ in range(20):
            while self.to_add or self.subscribed_q or self.news_q:
                for k in ("to_add", "news", "subscribed"):
                    self.apply((k,))
            self.apply(("tick",))
            self.now += 0.6


@settings(max_examples=500, deadline=None)
@given(st.lists(step, max_size=60))
# an answer to an older SUBSCRIBE, sent before an UNSUBSCRIBE the add worker took after it,
# must not count as the answer to the latest one (news off again until that one is taken)
@example([("park",), ("to_add",), ("commit",), ("news",), ("sleep", 1.5), ("park",),
          ("to_add",), ("subscribed",), ("commit",), ("to_add",)])
def test_no_parked_poll_is_left_behind_the_lac(steps):
    m = Model()
    for s in steps:
        m.apply(s)
        m.apply(("tick",))  # the read worker ticks every turn
    m.settle()
    assert all(p >= m.lac for p in m.polls), (m.polls, m.lac)
    if not m.polls:  # nothing parked: news off, at the latest once one more piece of news came
        m.apply(("commit",))
        m.settle()
        assert not m.news_on and m.rw.state == OFF


def test_news_turns_on_with_a_parked_poll_and_off_a_linger_after_the_last():
    w = WakeNews(linger_s=1.0)
    assert w.tick(0, 0.0) is None
    assert w.tick(1, 0.1) == SUBSCRIBE and w.tick(1, 0.2) is None
    assert not w.subscribed(w.number + 1)  # an answer to another SUBSCRIBE
    assert w.subscribed(w.number) and w.state == ON
    assert w.tick(0, 0.3) is None and w.tick(1, 0.9) is None  # a tailer's next poll: no change
    assert w.tick(0, 1.0) is None and w.tick(0, 1.9) is None
    assert w.tick(0, 2.0) == UNSUBSCRIBE and w.state == OFF
    assert w.news_unasked(2.5) is None and w.news_unasked(3.1) == UNSUBSCRIBE


def test_a_subscribe_not_answered_is_sent_again():
    w = WakeNews(linger_s=1.0)
    assert w.tick(1, 0.0) == SUBSCRIBE
    first = w.number
    assert w.tick(1, 0.5) is None and w.tick(1, 1.0) == SUBSCRIBE
    assert not w.subscribed(first) and w.subscribed(w.number)
