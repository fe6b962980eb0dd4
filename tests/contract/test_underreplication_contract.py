"""Autorecovery's records (bookie.metadata.underreplication) behave the same on every backend:
marks merge, locks and votes die with their holder's session, the election's first vote is the
auditor, the flag and the trigger, lost reports written once.  ``metadata_store`` runs each test
on the embedded store and on a real ZooKeeper (both layouts)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
import waiting


def wait_for(predicate, timeout_s=30.0, what="condition"):
    return waiting.wait_for(predicate, timeout_s, what)


def test_marks_merge_their_missing_bookies_and_unmark_removes_them(metadata_store):
    ur = UnderReplication(metadata_store)
    assert ur.marks() == {}
    assert ur.mark(7, ["b:2"]) is True
    assert ur.mark(7, ["b:2"]) is False
    assert ur.mark(7, ["a:1"]) is True
    assert ur.marks() == {7: ["a:1", "b:2"]}
    assert ur.mark_of(7)[0] == ["a:1", "b:2"]
    assert ur.unmark(7) is True and ur.unmark(7) is False
    assert ur.marks() == {} and ur.mark_of(7) is None


def test_a_lock_is_exclusive_and_released_with_unlock_or_the_holders_session(
        metadata_store, metadata_uri):
    ur = UnderReplication(metadata_store)
    other = open_metadata(metadata_uri, timeout_s=10.0, lease_ms=1000, watch_poll_s=0.02)
    try:
        theirs = UnderReplication(other)
        assert ur.try_lock(3, "me") is True
        assert theirs.try_lock(3, "them") is False
        assert theirs.lock_holder(3) == "me"
        ur.unlock(3)
        assert theirs.try_lock(3, "them") is True
    finally:
        other.close()  # the session ends: its lock goes with it
    assert wait_for(lambda: ur.try_lock(3, "me"), what="the closed session's lock to go")


def _hold_lock_and_vote(uri, ready):
    store = open_metadata(uri, timeout_s=10.0, lease_ms=1000, session_timeout_s=2.0)
    ur = UnderReplication(store)
    ur.try_lock(9, "child")
    ur.volunteer("child")
    ready.set()
    time.sleep(600)


def test_a_sigkilled_holders_lock_and_vote_expire_and_the_next_vote_is_the_auditor(
        metadata_store, metadata_uri):
    ur = UnderReplication(metadata_store)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_hold_lock_and_vote, args=(metadata_uri, ready))
    child.start()
    try:
        assert ready.wait(60)
        assert ur.try_lock(9, "me") is False
        assert ur.auditor()[1] == "child"
        mine = ur.volunteer("me")
        assert ur.votes()[-1] == mine
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        wait_for(lambda: ur.try_lock(9, "me"), what="the killed holder's lock to expire")
        wait_for(lambda: ur.auditor() == (mine, "me"), what="the next vote to be the auditor")
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)


def test_the_enable_flag_and_the_audit_trigger(metadata_store):
    ur = UnderReplication(metadata_store)
    assert ur.enabled() is True
    ur.set_enabled(False)
    ur.set_enabled(False)
    assert ur.enabled() is False
    ur.set_enabled(True)
    assert ur.enabled() is True
    assert ur.audit_trigger() == -1
    assert ur.trigger_audit() == 0
    assert ur.trigger_audit() == 1 and ur.audit_trigger() == 1


def test_lost_data_is_reported_once(metadata_store):
    ur = UnderReplication(metadata_store)
    assert ur.report_lost(5, {"reason": "no live copy"}) is True
    assert ur.report_lost(5, {"reason": "again"}) is False
    assert ur.lost() == {5: {"reason": "no live copy"}}
    ur.forget_lost(5)
    assert ur.lost() == {}


def test_coordination_nodes_are_not_data_that_format_must_protect(metadata_store):
    ur = UnderReplication(metadata_store)
    ur.volunteer("me")
    ur.try_lock(1, "me")
    ur.set_enabled(False)
    ur.trigger_audit()
    assert metadata_store.has_data() is False
    ur.mark(1, ["a:1"])
    assert metadata_store.has_data() is True


def test_the_cluster_lost_bookie_recovery_delay_is_stored_and_replaced(metadata_store):
    ur = UnderReplication(metadata_store)
    assert ur.recovery_delay_s() is None
    ur.set_recovery_delay_s(30)
    assert ur.recovery_delay_s() == 30
    ur.set_recovery_delay_s(0)
    assert UnderReplication(metadata_store).recovery_delay_s() == 0
    assert metadata_store.has_data() is False  # a setting, not data that format must protect
