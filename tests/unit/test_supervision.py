"""The supervisor's policy (core/supervision.py): restarts, their limit, fatal exits, and
read-only composed from its causes; examples, then properties over any sequence of events."""

from __future__ import annotations

from hypothesis import given, strategies as st

from bookie.core.supervision import (CAUSES, DisksFull, Log, ReadOnly, ReadOnlyCause, RequestGc,
                                     Restart, RestartFailed, Stop, Supervision, WorkerDied)

FATAL = {3: "found corruption", 4: "could not make the journal durable"}


def _kinds(actions) -> list[str]:
    return [type(a).__name__ for a in actions]


def test_a_death_is_restarted_until_the_limit_within_a_minute_then_the_bookie_stops():
    s = Supervision(restart_limit=2, fatal_exits=FATAL)
    assert _kinds(s.handle(WorkerDied("add", -9), 0.0)) == ["Log", "Restart"]
    assert _kinds(s.handle(WorkerDied("add", -9), 1.0)) == ["Log", "Restart"]
    assert _kinds(s.handle(WorkerDied("read", -9), 2.0)) == ["Log", "Restart"]  # its own count
    out = s.handle(WorkerDied("add", 1), 3.0)
    assert out[-1] == Stop("add worker died with exit status 1 3 times in a minute; stopping "
                           "the bookie", 1)
    assert s.handle(WorkerDied("read", -9), 4.0) == []  # stopping: nothing more


def test_deaths_older_than_the_window_are_forgotten():
    s = Supervision(restart_limit=1, fatal_exits=FATAL)
    s.handle(WorkerDied("gc", -9), 0.0)
    assert s.handle(WorkerDied("gc", -9), 61.0)[-1] == Restart("gc")


def test_a_fatal_exit_stops_at_once_with_its_status_and_a_memory_kill_is_not_counted():
    s = Supervision(restart_limit=0, fatal_exits=FATAL)
    assert s.handle(WorkerDied("add", -9, killed_for_memory=True), 0.0)[-1] == Restart("add")
    assert s.handle(WorkerDied("journal-0", 4), 1.0) == [
        Stop("journal-0 worker could not make the journal durable (exit status 4); stopping "
             "the bookie", 4)]


def test_a_failed_restart_counts_and_is_retried_a_fatal_one_stops():
    s = Supervision(restart_limit=2, fatal_exits=FATAL)
    s.handle(WorkerDied("read", -9), 0.0)
    out = s.handle(RestartFailed("read", -9, "killed before it was ready"), 0.5)
    assert out[0].level == "warning" and out[-1] == Restart("read")
    assert s.handle(RestartFailed("read", 3, "corrupt"), 0.6)[-1].code == 3


def test_read_only_while_any_cause_holds_each_change_once_at_warning():
    s = Supervision(restart_limit=5, fatal_exits=FATAL)
    out = s.handle(ReadOnlyCause("forced", True), 0.0)
    assert out[0] == ReadOnly(True) and out[1].level == "warning"
    assert s.handle(ReadOnlyCause("journal_full", True), 0.0) == []  # still read-only
    assert s.handle(ReadOnlyCause("forced", False), 0.0) == []  # the journal still full
    assert s.handle(ReadOnlyCause("journal_full", False), 0.0)[0] == ReadOnly(False)


def test_full_disks_make_it_read_only_or_stop_it_when_read_only_mode_is_off():
    s = Supervision(restart_limit=5, fatal_exits=FATAL)
    out = s.handle(DisksFull(("/l1",)), 0.0)
    assert _kinds(out) == ["Log", "ReadOnly", "Log"] and out[0].event == "disks full"
    assert s.handle(DisksFull(("/l1",)), 1.0) == []
    off = Supervision(restart_limit=5, fatal_exits=FATAL, read_only_mode_enabled=False)
    assert off.handle(DisksFull(("/l1",)), 0.0) == [
        Stop("disks full (/l1) and readOnlyModeEnabled=false", 1)]


def test_full_disks_ask_for_a_gc_pass_when_they_fill_and_every_gc_wait_while_full():
    s = Supervision(restart_limit=5, fatal_exits=FATAL, gc_wait_s=10.0)
    assert RequestGc() in s.handle(DisksFull(("/l1",)), 0.0)  # they fill: at once
    assert s.handle(DisksFull(("/l1",)), 5.0) == []  # full still, within gcWaitTime
    assert s.handle(DisksFull(("/l1",)), 10.0) == [RequestGc()]  # full still, gcWaitTime later
    assert RequestGc() not in s.handle(DisksFull(()), 11.0)  # room again
    assert RequestGc() in s.handle(DisksFull(("/j",)), 12.0)  # full again: at once
    # No metadata store (no gc_wait_s): no GC pass to ask for.
    bare = Supervision(restart_limit=5, fatal_exits=FATAL)
    assert RequestGc() not in bare.handle(DisksFull(("/l1",)), 0.0) + bare.handle(
        DisksFull(("/l1",)), 100.0)


_ROLES = st.sampled_from(["add", "read", "gc", "journal-0"])
_EVENTS = st.one_of(
    st.builds(WorkerDied, _ROLES, st.sampled_from([-9, -11, 1, 3, 4]), st.booleans()),
    st.builds(RestartFailed, _ROLES, st.sampled_from([None, -9, 1, 3]), st.just("failed")),
    st.builds(ReadOnlyCause, st.sampled_from(CAUSES), st.booleans()),
    st.builds(DisksFull, st.sampled_from([(), ("/l1",), ("/j", "/l1")])))


@given(events=st.lists(st.tuples(_EVENTS, st.floats(0, 5)), max_size=60),
       limit=st.integers(0, 4), ro_mode=st.booleans())
def test_properties_over_any_sequence_of_events(events, limit, ro_mode):
    s = Supervision(restart_limit=limit, fatal_exits=FATAL, read_only_mode_enabled=ro_mode,
                    gc_wait_s=2.0)
    now, told, stops, last_gc, full_before = 0.0, False, 0, None, False
    for event, step in events:
        now += step
        out = s.handle(event, now)
        stops += sum(isinstance(a, Stop) for a in out)
        if any(isinstance(a, RequestGc) for a in out):
            # only for full disks, and at most once per gcWaitTime unless they had room between
            assert isinstance(event, DisksFull) and event.full
            assert last_gc is None or now >= last_gc + 2.0 or not full_before
            last_gc = now
        full_before = s.causes["disks_full"]
        for a in out:
            assert isinstance(a, (Restart, Stop, ReadOnly, Log, RequestGc))
            if isinstance(a, ReadOnly):
                assert a.on != told  # each change once
                told = a.on
        if not s.stopped:
            # read-only is exactly "some cause holds", and the workers were told so
            assert told == any(s.causes.values()) == s.readonly
        if isinstance(event, (WorkerDied, RestartFailed)) and out:
            fatal = event.returncode in FATAL
            assert isinstance(out[-1], Stop) == (fatal or s.stopped)
            if fatal:
                assert out == [Stop(out[0].reason, event.returncode)]
            else:
                # never more restarts of one role within the window than the limit allows
                assert isinstance(out[-1], Restart) or len(s.restarts[event.role]) > limit
            if isinstance(out[-1], Restart):
                assert out[-1].role == event.role
    assert stops <= 1  # one stop at most: after it nothing more is decided
