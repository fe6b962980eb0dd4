"""The nemesis's pure parts: traceable payloads, the seeded schedule, and the checker's rules
(each rule shown to fire on a history that breaks it, and to stay quiet on one that keeps it)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from bookie.testing.nemesis.checker import FinalLedger, FinalLog, check_round
from bookie.testing.nemesis.payload import fingerprint, make_payload, parse_payload
from bookie.testing.nemesis.schedule import KINDS, enabled_kinds, make_schedule

W = "r0w0g0.0"


def ev(kind, t, **fields):
    return {"ev": kind, "p": fields.pop("p", "writer"), "t": t, **fields}


def acked_history(ledger_id=1, n=5, writer=W, t=1.0):
    """A writer that created ``ledger_id`` and had adds 0..n-1 acknowledged as entries 0..n-1."""
    events = [ev("create", t, l=ledger_id, w=writer)]
    for s in range(n):
        events.append(ev("add", t + s * 0.01, l=ledger_id, w=writer, s=s, n=1))
        events.append(ev("ack", t + s * 0.01 + 0.005, l=ledger_id, w=writer, s=s, n=1, e=s,
                         t0=t + s * 0.01))
    return events


def final(ledger_id=1, n=5, writer=W, last=None):
    last = n - 1 if last is None else last
    return {ledger_id: FinalLedger(ledger_id, last, {e: make_payload(writer, e)
                                                     for e in range(last + 1)})}


def kinds(report):
    return sorted({v.kind for v in report.violations})


# -- payloads ---------------------------------------------------------------------------------

@given(st.text(alphabet="abcdefgr0123456789.", min_size=1, max_size=20),
       st.integers(min_value=0, max_value=10**9))
def test_payload_parses_back_to_its_writer_and_seq(writer, seq):
    assert parse_payload(make_payload(writer, seq)) == (writer, seq)


@given(st.integers(min_value=0, max_value=10**6), st.data())
def test_any_changed_byte_makes_a_payload_unrecognisable(seq, data):
    payload = bytearray(make_payload(W, seq))
    i = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    payload[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    assert parse_payload(bytes(payload)) is None


@given(st.binary(max_size=300))
def test_foreign_bytes_are_never_taken_for_a_payload(data):
    assert parse_payload(data) is None or make_payload(*parse_payload(data)) == data


# -- schedule ---------------------------------------------------------------------------------

@settings(max_examples=50)
@given(st.integers(min_value=0, max_value=2**31), st.integers(min_value=0, max_value=50))
def test_the_same_seed_gives_the_same_schedule(seed, round_no):
    args = (seed, round_no, 15.0, KINDS, 5, 3, 2)
    assert make_schedule(*args) == make_schedule(*args)


@settings(max_examples=50)
@given(st.integers(min_value=0, max_value=2**31), st.floats(min_value=5, max_value=120))
def test_faults_end_before_the_round_and_overlap_at_most_twice(seed, round_s):
    faults = make_schedule(seed, 0, round_s, KINDS, 5, 3, 2)
    for f in faults:
        assert 0.5 <= f.at_s and f.at_s + f.duration_s <= round_s - 1.0 + 1e-6
        assert f.kind in KINDS
        active = [g for g in faults if g.at_s <= f.at_s < g.at_s + g.duration_s]
        assert len(active) <= 2


def test_schedules_differ_between_seeds_and_rounds():
    kinds_ = enabled_kinds(zookeeper=True, disk=True, network=True)
    assert make_schedule(1, 0, 30, kinds_, 5, 3, 2) != make_schedule(2, 0, 30, kinds_, 5, 3, 2)
    assert make_schedule(1, 0, 30, kinds_, 5, 3, 2) != make_schedule(1, 1, 30, kinds_, 5, 3, 2)


def test_a_run_without_disks_or_zookeeper_draws_no_such_fault():
    kinds_ = enabled_kinds(zookeeper=False, disk=False, network=False)
    for seed in range(20):
        for f in make_schedule(seed, 0, 60, kinds_, 5, 3, 0):
            assert not f.kind.startswith(("zk_", "disk", "partition", "lossy", "slow"))


# -- ledgers ----------------------------------------------------------------------------------

def test_a_history_whose_acked_entries_all_read_back_passes():
    report = check_round(acked_history(), final(), {})
    assert report.violations == []
    assert (report.acked, report.checked, report.lost) == (5, 5, 0)


def test_an_acked_entry_beyond_the_close_is_lost():
    report = check_round(acked_history(n=5), final(n=5, last=3), {})
    assert kinds(report) == ["closed_below_ack", "lost"]
    assert report.lost == 1


def test_an_acked_entry_with_other_bytes_is_lost():
    state = final()
    state[1].entries[2] = make_payload("someone-else", 2)
    report = check_round(acked_history(), state, {})
    assert "lost" in kinds(report) and "unwritten_bytes" in kinds(report)


def test_unacked_adds_may_be_in_the_ledger():
    events = acked_history(n=3) + [ev("add", 5.0, l=1, w=W, s=3, n=1),
                                   ev("fail", 6.0, l=1, w=W, s=3, n=1, err="BKTimeoutError", t0=5.0)]
    assert check_round(events, final(n=4), {}).violations == []


def test_an_unrecoverable_ledger_with_acks_is_reported_unverified():
    report = check_round(acked_history(), {1: FinalLedger(1, None, error="boom")}, {})
    assert kinds(report) == ["unrecoverable"] and report.unverified == 5


def test_an_add_invoked_after_a_recovery_must_not_be_acked():
    events = acked_history(n=3) + [ev("recover", 2.0, p="rec", l=1, last=2, t0=1.9),
                                   ev("add", 2.5, l=1, w=W, s=3, n=1),
                                   ev("ack", 2.6, l=1, w=W, s=3, n=1, e=3, t0=2.5)]
    report = check_round(events, final(n=4), {})
    assert "ack_after_fence" in kinds(report) and "recoveries_disagree" in kinds(report)


def test_two_adds_acked_as_the_same_entry_are_a_violation():
    events = acked_history(n=2) + [ev("ack", 3.0, l=1, w=W, s=5, n=1, e=1, t0=2.9)]
    assert "duplicate_ack" in kinds(check_round(events, final(n=2), {}))


def test_entries_of_one_writer_out_of_order_are_reordered():
    state = final(n=3)
    state[1].entries[1], state[1].entries[2] = state[1].entries[2], state[1].entries[1]
    events = acked_history(n=1) + [ev("add", 2.0, l=1, w=W, s=1, n=2)]
    assert kinds(check_round(events, state, {})) == ["reordered"]


def test_a_missing_entry_below_the_close_is_a_hole():
    state = final(n=3)
    del state[1].entries[1]
    assert "hole" in kinds(check_round(acked_history(n=1), state, {}))


def read_event(e, lac, data, t=3.0):
    ident = parse_payload(data)
    return ev("read", t, p="tailer", l=1, h=1, e=e, lac=lac, d=fingerprint(data),
              id=f"{ident[0]}:{ident[1]}" if ident else None)


def test_reads_that_match_the_recovered_ledger_pass():
    events = acked_history() + [read_event(e, 4, make_payload(W, e)) for e in range(5)]
    report = check_round(events, final(), {})
    assert report.violations == [] and report.reads_checked == 5


def test_a_read_past_the_handles_lac_is_a_violation():
    events = acked_history() + [read_event(4, 3, make_payload(W, 4))]
    assert kinds(check_round(events, final(), {})) == ["read_past_lac"]


def test_a_read_of_bytes_nobody_wrote_is_a_violation():
    events = acked_history() + [read_event(2, 4, b"garbage")]
    assert kinds(check_round(events, final(), {})) == ["read_differs", "unwritten_bytes"]


def test_a_read_of_an_entry_recovery_dropped_is_a_violation():
    events = acked_history(n=3) + [ev("add", 2.0, l=1, w=W, s=3, n=1),
                                   read_event(3, 3, make_payload(W, 3))]
    assert kinds(check_round(events, final(n=3), {})) == ["read_not_in_ledger"]


def test_a_lac_going_backwards_on_one_handle_is_a_violation():
    events = acked_history() + [ev("lac", 3.0, p="tailer", l=1, h=1, v=3),
                                ev("lac", 3.1, p="tailer", l=1, h=1, v=2),
                                ev("lac", 3.2, p="tailer", l=1, h=2, v=1)]
    report = check_round(events, final(), {})
    assert kinds(report) == ["lac_backwards"] and report.lacs_checked == 3


def test_a_lac_above_the_close_is_a_violation():
    events = acked_history() + [ev("lac", 3.0, p="tailer", l=1, h=1, v=7)]
    assert kinds(check_round(events, final(), {})) == ["lac_beyond_close"]


@settings(max_examples=40)
@given(st.integers(min_value=1, max_value=40), st.data())
def test_dropping_any_acked_entry_is_always_caught(n, data):
    events = acked_history(n=n)
    state = final(n=n)
    victim = data.draw(st.integers(min_value=0, max_value=n - 1))
    del state[1].entries[victim]
    report = check_round(events, state, {})
    assert report.lost == 1 and "lost" in kinds(report)


# -- logs -------------------------------------------------------------------------------------

def log_history(name="log", plan=(("w1", 0, 3), ("w2", 1, 2)), t=1.0):
    """Writers appending in turn: (writer, ledger_id, appends)."""
    events = []
    for writer, ledger_id, count in plan:
        events.append(ev("log_open", t, log=name, w=writer))
        for s in range(count):
            t += 0.01
            events.append(ev("append", t, log=name, w=writer, s=s))
            events.append(ev("log_ack", t + 0.005, log=name, w=writer, s=s, l=ledger_id, e=s,
                             t0=t))
    return events


def log_final(records, name="log"):
    return {name: FinalLog(name, [(l, e, make_payload(w, s)) for l, e, w, s in records])}


GOOD_LOG = [(0, 0, "w1", 0), (0, 1, "w1", 1), (0, 2, "w1", 2), (1, 0, "w2", 0), (1, 1, "w2", 1)]


def test_a_log_holding_every_append_in_order_passes():
    report = check_round(log_history(), {}, log_final(GOOD_LOG))
    assert report.violations == [] and report.checked == 5


def test_a_log_missing_an_acked_append_has_lost_it_and_a_gap():
    records = [r for r in GOOD_LOG if r[:2] != (0, 1)]
    assert kinds(check_round(log_history(), {}, log_final(records))) == ["gap", "lost"]


def test_a_log_repeating_an_append_is_reordered():
    records = GOOD_LOG[:3] + [(1, 0, "w1", 2)] + [(1, 1, "w2", 0)]
    report = check_round(log_history(plan=(("w1", 0, 3), ("w2", 1, 1))), {}, log_final(records))
    assert "reordered" in kinds(report)


def test_a_log_with_an_earlier_writer_after_a_later_one_is_interleaved():
    records = [(0, 0, "w1", 0), (0, 1, "w2", 0), (0, 2, "w1", 1)]
    events = log_history(plan=(("w1", 0, 0), ("w2", 0, 0))) + [
        ev("append", 2.0, log="log", w="w1", s=0), ev("append", 2.0, log="log", w="w1", s=1),
        ev("append", 2.0, log="log", w="w2", s=0)]
    assert "interleaved_writers" in kinds(check_round(events, {}, log_final(records)))


def test_a_log_read_must_be_a_prefix_of_the_final_log():
    ids = [[l, e, f"{w}:{s}"] for l, e, w, s in GOOD_LOG]
    good = ev("log_read", 3.0, p="reader", log="log", recs=ids[:3])
    bad = ev("log_read", 3.1, p="reader", log="log", recs=ids[:2] + [ids[3]])
    assert check_round(log_history() + [good], {}, log_final(GOOD_LOG)).violations == []
    report = check_round(log_history() + [bad], {}, log_final(GOOD_LOG))
    assert kinds(report) == ["log_read_not_prefix"]
