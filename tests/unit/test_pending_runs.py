"""``PendingAdds`` counts an answer per run (range ids, Qw = E) and keeps entries as runs:
the same confirmations, masks and entries as counting entry by entry (the reference below is
the per-entry count it replaced)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.protocol.pending import PendingAdds


class EntryByEntry:
    """The per-entry count: one mask and one count per pending entry."""

    def __init__(self, e, qw, qa):
        self.e, self.qw, self.qa = e, qw, qa
        self.lac, self.next, self.masks, self.data, self.failed = -1, 0, {}, {}, 0

    def extend(self, datas):
        for d in datas:
            self.masks[self.next] = 0
            self.data[self.next] = d
            self.next += 1

    def ack(self, position, entry_ids):
        bit = 1 << position
        if self.failed & bit:
            return None
        for e in entry_ids:
            if self.lac < e < self.next and (position - e) % self.e < self.qw:
                self.masks[e] |= bit
        first = self.lac + 1
        while self.lac + 1 < self.next and bin(self.masks[self.lac + 1]).count("1") >= self.qa:
            self.lac += 1
        return (first, self.lac) if self.lac >= first else None

    def fail(self, position):
        self.failed |= 1 << position
        for e in self.masks:
            if e > self.lac:
                self.masks[e] &= ~(1 << position)

    def revive(self, position):
        self.failed &= ~(1 << position)


@settings(max_examples=400)
@given(st.integers(1, 4), st.data())
def test_counting_per_run_confirms_what_counting_per_entry_does(qw, data):
    e = data.draw(st.sampled_from([qw, qw, qw + 1]), label="ensemble size")
    qa = data.draw(st.integers(1, qw), label="ack quorum")
    runs, ref = PendingAdds(e, qw, qa), EntryByEntry(e, qw, qa)
    for _ in range(data.draw(st.integers(0, 30), label="steps")):
        op = data.draw(st.sampled_from(["add", "ack", "ack", "ack", "ack", "fail", "revive"]))
        position = data.draw(st.integers(0, e - 1))
        if op == "add":
            datas = [b"%d" % (runs.next_entry_id + i) for i in range(data.draw(st.integers(1, 30)))]
            runs.extend(datas)
            ref.extend(datas)
        elif op == "ack":  # mostly around the window of pending entries
            start = data.draw(st.integers(max(0, runs.lac - 3), runs.next_entry_id + 2))
            ids = range(start, start + data.draw(st.integers(0, 30)))
            as_list = data.draw(st.booleans())
            assert runs.ack(position, list(ids) if as_list else ids) == ref.ack(position, ids)
        elif op == "fail":
            runs.fail_position(position)
            ref.fail(position)
        else:
            runs.revive_position(position)
            ref.revive(position)
        assert runs.lac == ref.lac and runs.next_entry_id == ref.next
        for entry_id in range(runs.lac + 1, runs.next_entry_id):
            assert runs.data(entry_id) == ref.data[entry_id]


def test_a_long_window_confirms_in_runs_and_drops_confirmed_runs():
    p = PendingAdds(1, 1, 1)
    for _ in range(40):
        p.extend([b"x"] * 256)
    assert p.ack(0, range(256, 10240)) is None  # the first run is not answered yet
    assert p.ack(0, range(0, 256)) == (0, 10239)
    assert len(p) == 0 and p._runs == [] and p._run_firsts == []
    p.extend([b"y"] * 5000)
    assert p.ack(0, range(10240, 12000)) == (10240, 11999)
    assert p.data(12000) == b"y" and len(p._runs) == 1
