"""The grown-up nemesis's pure parts: lifecycle kinds in the schedule, the per-replica rules,
the catalogue of ledgers living across rounds, and the checker's new rules (each shown to fire
on a history that breaks it and to stay quiet on one that keeps it)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from bookie.testing.nemesis.catalogue import Catalogue
from bookie.testing.nemesis.checker import FinalLedger, FinalLog, check_round
from bookie.testing.nemesis.client_proc import records_digest
from bookie.testing.nemesis.payload import fingerprint, make_payload
from bookie.testing.nemesis.replicas import (CORRUPT, MISSING, UNREACHABLE, judge_ledger,
                                             write_set_ids)
from bookie.testing.nemesis.schedule import (DISK_LIFECYCLE_KINDS, LIFECYCLE_KINDS, LOSS_KINDS,
                                             enabled_kinds, make_schedule, owed_faults)

W = "r0w0g0.0"


def ev(kind, t, **fields):
    return {"ev": kind, "p": fields.pop("p", "writer"), "t": t, **fields}


def acked_history(ledger_id=1, n=5, writer=W, t=1.0):
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


# -- schedule ---------------------------------------------------------------------------------

def test_lifecycle_kinds_carry_the_names_the_summary_reports():
    assert {"compaction", "rebuild_index", "lost_for_good", "decommission", "squat",
            "readdress", "overreplicated", "journal_full"} <= set(LIFECYCLE_KINDS)


@settings(max_examples=60)
@given(st.integers(min_value=0, max_value=2**31), st.sampled_from([8.0, 15.0, 30.0]))
def test_every_lifecycle_kind_is_owed_a_fault_within_three_rounds_whatever_the_seed(seed, round_s):
    # issue 32: every lifecycle kind happens in any 240 s run (a few rounds), whatever the seed
    on = enabled_kinds(zookeeper=False, disk=False, network=False, lifecycle=True)
    owed = list(LIFECYCLE_KINDS)
    for round_no in range(3):
        faults = make_schedule(seed, round_no, round_s, on, 5, 3, 2, owed=owed)
        assert sum(1 for f in faults if f.kind in LOSS_KINDS) <= 1
        assert all(f.at_s + f.duration_s <= round_s - 1.0 + 1e-9 for f in faults)
        owed = [k for k in owed if all(f.kind != k for f in faults)]
    assert owed == []


def test_owed_disk_kinds_wait_for_a_run_with_disks():
    faults = owed_faults(1, 0, 15.0, list(DISK_LIFECYCLE_KINDS) + ["squat"], 5, 3, disk_bookies=0)
    assert [f.kind for f in faults] == ["squat"]


def test_lifecycle_faults_are_drawn_only_with_lifecycle_on():
    off = enabled_kinds(zookeeper=False, disk=False, network=False)
    on = enabled_kinds(zookeeper=False, disk=False, network=False, lifecycle=True)
    assert not set(off) & set(LIFECYCLE_KINDS)
    assert set(LIFECYCLE_KINDS) <= set(on)
    drawn = {f.kind for seed in range(30) for f in make_schedule(seed, 0, 30, on, 5, 3, 2)}
    assert set(LIFECYCLE_KINDS) <= drawn


@settings(max_examples=60)
@given(st.integers(min_value=0, max_value=2**31), st.integers(min_value=0, max_value=40))
def test_at_most_one_bookie_is_lost_for_good_or_decommissioned_per_round(seed, round_no):
    on = enabled_kinds(zookeeper=True, disk=True, network=False, lifecycle=True)
    faults = make_schedule(seed, round_no, 60.0, on, 5, 3, 2)
    assert sum(1 for f in faults if f.kind in LOSS_KINDS) <= 1


def test_without_tmpfs_disks_no_disk_readonly_is_drawn():
    on = enabled_kinds(zookeeper=False, disk=False, network=False, lifecycle=True)
    for seed in range(20):
        assert all(f.kind != "disk_readonly" for f in make_schedule(seed, 0, 60, on, 5, 3, 0))


# -- per-replica rules ------------------------------------------------------------------------

FRAGMENTS = [(0, ["a", "b", "c"]), (10, ["a", "d", "c"])]


def test_the_write_set_follows_the_fragment_of_the_entry():
    assert write_set_ids(FRAGMENTS, 0, 3, 2) == ["a", "b"]
    assert write_set_ids(FRAGMENTS, 4, 3, 2) == ["b", "c"]
    assert write_set_ids(FRAGMENTS, 10, 3, 2) == ["d", "c"]
    assert write_set_ids(FRAGMENTS, 11, 3, 3) == ["c", "a", "d"]


def copies_of(entries, holders, bad=None):
    """Entry -> {bookie: payload} for every bookie in ``holders``; ``bad``: bookie -> value."""
    out = {}
    for e, payload in entries.items():
        out[e] = {b: payload for b in holders}
        out[e].update(bad or {})
    return out


EXPECTED = {e: make_payload(W, e) for e in range(4)}


def test_every_copy_in_place_passes_and_counts_each_copy():
    report = judge_ledger(1, EXPECTED, copies_of(EXPECTED, "abc"), 2, 3, require_qw=True)
    assert report.violations == [] and report.replica_checks == 12 and report.entries == 4


def test_fewer_than_qa_copies_is_under_replicated():
    report = judge_ledger(1, EXPECTED, copies_of(EXPECTED, "ab", {"b": MISSING}), 2, 2, False)
    assert [v[0] for v in report.violations] == ["under_replicated"]


def test_a_bookie_that_does_not_answer_does_not_hold_the_entry():
    report = judge_ledger(1, EXPECTED, copies_of(EXPECTED, "ab", {"a": UNREACHABLE}), 2, 2, False)
    assert [v[0] for v in report.violations] == ["under_replicated"]


def test_other_bytes_or_a_bad_digest_on_one_replica_differ():
    other = copies_of(EXPECTED, "abc", {"c": make_payload("someone", 1)})
    assert [v[0] for v in judge_ledger(1, EXPECTED, other, 2, 3, False).violations] == \
        ["replica_differs"]
    corrupt = copies_of(EXPECTED, "abc", {"c": CORRUPT})
    assert [v[0] for v in judge_ledger(1, EXPECTED, corrupt, 2, 3, False).violations] == \
        ["replica_differs"]


def test_below_qw_is_counted_and_is_a_violation_only_once_healing_had_its_time():
    copies = copies_of(EXPECTED, "abc", {"c": MISSING})
    before = judge_ledger(1, EXPECTED, copies, 2, 3, require_qw=False)
    assert before.violations == [] and before.below_qw == 4
    after = judge_ledger(1, EXPECTED, copies, 2, 3, require_qw=True)
    assert [v[0] for v in after.violations] == ["below_qw"]


# -- the catalogue ----------------------------------------------------------------------------

def test_kept_ledgers_come_due_for_delete_in_a_later_round_except_the_whole_run_share():
    cat = Catalogue(seed=3, keep_share=0.5)
    for lid in range(1, 21):
        cat.add_round(0, acked_history(ledger_id=lid, n=2), final(ledger_id=lid, n=2))
    assert len(cat.kept) == 20 and cat.due_for_delete(0) == []
    due = cat.due_for_delete(1)
    assert 0 < len(due) < 20 and all(not cat.kept[lid].whole_run for lid in due)
    cat.note_deletes([ev("deleted", 5.0, l=due[0]), ev("delete_fail", 5.0, l=due[1])])
    assert due[0] in cat.deleted and due[0] not in cat.kept
    cat.settle_failed_deletes(lambda lid: lid != due[1])  # the failed delete took effect
    assert due[1] in cat.deleted and not cat.maybe_deleted


def test_an_unrecovered_ledger_is_not_kept():
    cat = Catalogue(seed=1)
    cat.add_round(0, acked_history(), {1: FinalLedger(1, None, error="boom")})
    assert cat.kept == {}


# -- the checker's new rules ------------------------------------------------------------------

def test_a_reader_told_a_lac_it_could_not_read_is_a_reader_violation():
    events = acked_history() + [ev("reader_violation", 9.0, p="tailer", l=1, h=1, lac=4, e=3,
                                   err="BookieError: entry 3 is on none of its replicas",
                                   t0=2.0)]
    report = check_round(events, final(), {})
    assert kinds(report) == ["reader_violation"] and report.reader_violations == 1


def test_the_writers_own_close_below_an_acknowledged_entry_is_a_violation():
    good = acked_history() + [ev("close", 2.0, l=1, last=4)]
    assert check_round(good, final(), {}).violations == []
    bad = acked_history() + [ev("close", 2.0, l=1, last=3)]
    assert kinds(check_round(bad, final(last=3), {})) == ["close_below_ack", "closed_below_ack",
                                                          "lost"]


def test_recovery_finding_another_end_than_the_writers_close_is_a_violation():
    events = acked_history() + [ev("add", 1.9, l=1, w=W, s=5, n=1), ev("close", 2.0, l=1, last=4)]
    report = check_round(events, final(n=6), {})
    assert kinds(report) == ["close_not_final"]


def test_recovery_keeping_an_unacknowledged_add_is_named_not_a_violation():
    events = acked_history() + [ev("add", 1.9, l=1, w=W, s=5, n=1)]
    report = check_round(events, final(n=6), {})
    assert report.violations == []
    assert report.kept_unacknowledged == [f"ledger 1 entry 5: {W}:5"]


def test_a_read_of_a_payload_never_added_to_that_ledger_is_a_violation():
    stranger = make_payload("r0w1g0.0", 2)  # a real payload, of another writer's ledger
    read = ev("read", 3.0, p="tailer", l=1, h=1, e=2, lac=4, d=fingerprint(stranger),
              id="r0w1g0.0:2")
    assert "read_unacknowledged" in kinds(check_round(acked_history() + [read], final(), {}))


def test_a_log_read_recorded_as_a_digest_must_be_a_prefix_of_the_final_log():
    records = [(0, e, "w1", e) for e in range(4)]
    events = []
    for l, e, w, s in records:
        events += [ev("append", 1.0 + e, log="log", w=w, s=s),
                   ev("log_ack", 1.1 + e, log="log", w=w, s=s, l=l, e=e, t0=1.0 + e)]
    ids = [(l, e, f"{w}:{s}") for l, e, w, s in records]
    final_log = {"log": FinalLog("log", [(l, e, make_payload(w, s)) for l, e, w, s in records])}
    good = ev("log_read", 9.0, p="reader", log="log", n=3, h=records_digest(ids[:3]))
    bad = ev("log_read", 9.1, p="reader", log="log", n=2, h=records_digest([ids[0], ids[2]]))
    assert check_round(events + [good], {}, final_log).violations == []
    assert kinds(check_round(events + [bad], {}, final_log)) == ["log_read_not_prefix"]


# -- the tailer's told-LAC reads ---------------------------------------------------------------

class _Handle:
    """A read handle whose ``read_entries`` is an iterator (as the client's is) that fails for
    the first ``failures`` calls, the error raised only as it is iterated."""

    ledger_id = 7

    def __init__(self, failures):
        self.failures = failures

    def read_entries(self, first, last):
        self.failures -= 1
        failing = self.failures >= 0
        for entry_id in range(first, last + 1):
            if failing:
                raise TimeoutError(f"entry {entry_id}: no replica answered in time")
            yield entry_id


class _History:
    def __init__(self):
        self.events = []

    def record(self, ev, **fields):
        self.events.append({"ev": ev, **fields})


def test_a_told_read_retries_errors_the_iterator_raises_late_and_then_reads(monkeypatch):
    from bookie.testing.nemesis import client_proc
    import time
    monkeypatch.setattr(client_proc.time, "sleep", lambda s: None)
    hist = _History()
    got = client_proc._read_told(_Handle(failures=2), 1, 3, 5, 5, time.monotonic(), hist)
    assert got == [3, 4, 5] and hist.events == []


def test_a_told_read_that_never_succeeds_records_a_reader_violation(monkeypatch):
    from bookie.testing.nemesis import client_proc
    import time
    monkeypatch.setattr(client_proc, "OP_TIMEOUT_S", 0.2)
    hist = _History()
    got = client_proc._read_told(_Handle(failures=10**6), 1, 3, 5, 5, time.monotonic(), hist)
    assert got == [] and [e["ev"] for e in hist.events] == ["reader_violation"]
    assert hist.events[0]["lac"] == 5 and "no replica answered" in hist.events[0]["err"]


def test_an_operator_step_that_times_out_reports_what_it_said_so_far(tmp_path, monkeypatch):
    # The 777 soak's incident "recover ...: exit -1: timed out after 240 s" said nothing of
    # where the verb was stuck; its last lines of progress now come with the timeout
    from bookie.testing.nemesis import lifecycle
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\necho 'recover: ledger 7 (3/9): healed' >&2\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(lifecycle.sys, "executable", str(slow))
    status, out = lifecycle.shell(["recover", "h:1"], timeout_s=1.0)
    assert status == -1
    assert out == "timed out after 1 s: recover: ledger 7 (3/9): healed"


def test_every_rack_writer_quorum_can_be_placed_on_the_nemesis_racks():
    """A rack writer is never refused a ledger for good: its quorum fits RACKS racks under
    enforceMinNumRacksPerWriteQuorum (E3 Qw2 on two racks never does)."""
    import random

    from bookie.client.protocol.placement import Placement
    from bookie.testing.nemesis.workload import LIFECYCLE_QUORUMS, RACKS, rack_quorum

    bookies = [f"b{i}" for i in range(5)]
    placement = Placement("rackaware", {b: f"/nemesis/rack{i % RACKS}" for i, b in enumerate(bookies)},
                          min_domains=2, enforce=True)
    for quorum in LIFECYCLE_QUORUMS:
        e, qw, _ = rack_quorum(quorum)
        ensemble = placement.choose(e, qw, bookies, random.Random(1))
        assert ensemble is not None and placement.short_of(ensemble, qw) is None, quorum
    e, qw = 3, 2  # the quorum rack_quorum widens: refused as it was
    assert placement.short_of(placement.choose(e, qw, bookies, random.Random(1)), qw) is not None


def test_no_bookie_is_lost_for_good_while_a_renames_single_copy_ledger_lives():
    """The 30-minute soak of seed 3401: a rename's write-quorum-1 ledger had entries 5-9 on a
    bookie the same round then lost for good; they were lost by definition, and the ledger named
    the lost bookie in every later round (``not_healed``).  The fault now waits for such a
    ledger to be checked and deleted."""
    import pytest
    from bookie.testing.nemesis.faults import Nemesis
    from bookie.testing.nemesis.lifecycle import LifecycleFaults
    faults = LifecycleFaults.__new__(LifecycleFaults)
    faults._lifecycle_init()
    faults._Skip = Nemesis._Skip
    faults.single_copy_ledgers.add(36)
    with pytest.raises(Nemesis._Skip, match=r"write-quorum-1 ledger is open \(\[36\]\)"):
        faults._lost_for_good(0, "auto")  # before touching any bookie (it has none here)
