"""Autorecovery with real bookies: a bookie killed for good is replaced in every ledger, each
entry ends on Qw live bookies that really hold it (read from each with the raw client), and a
second loss afterwards loses nothing; a bookie back within the delay costs no copy; a write
quorum 1 ledger on a lost bookie is reported once; the auditor and a replication worker killed
with SIGKILL are taken over.

All are opt-in (``-m autorecovery_slow``, about 3 minutes): each starts four or five bookies
and waits out a delay, a lease and a grace period.  The default run covers the same copying and
metadata path through ``bookie shell recover`` (test_autorecovery_shell.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.protocol.quorum import write_set
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
import waiting

# zkTimeout: also the grace a new auditor gives bookies it never saw registered
FAST = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "2",
        "openLedgerRereplicationGracePeriod": "1000", "gcWaitTime": "600000",
        "zkTimeout": "4000"}
BOUND_S = 120.0  # generous: the machine is shared and loaded


def wait_for(predicate, timeout_s=BOUND_S, what="condition"):
    return waiting.wait_for(predicate, timeout_s, what, step_s=0.2)


def dump_logs(lb):
    for i in range(lb.n):
        print(f"--- bookie {i} ({lb.bookies[i]}) log tail ---\n{lb.log(i)[-4000:]}")


def write_ledgers(bk, count, E=3, Qw=2, Qa=2, entries=40, size=100):
    ids = []
    for n in range(count):
        h = bk.create_ledger(E, Qw, Qa)
        for e in range(entries):
            h.add_entry(f"{n}-{e}-".encode() + b"x" * size)
        h.close()
        ids.append(h.ledger_id)
    return ids


def names(bk, ledger_id, bookie) -> bool:
    return any(bookie in ensemble for _, ensemble in bk.ledger_metadata(ledger_id).fragments)


def assert_every_entry_on_qw_live_copies(bk, ledger_ids, dead):
    """Each entry read from each bookie of its write set: all hold the same bytes."""
    clients: dict[str, RawBookieClient] = {}
    try:
        for ledger_id in ledger_ids:
            meta = bk.ledger_metadata(ledger_id)
            E, Qw = meta.ensemble_size, meta.write_quorum
            for e in range(meta.last_entry_id + 1):
                ensemble = meta.ensemble_for(e)
                copies = set()
                for p in write_set(e, E, Qw):
                    bookie = ensemble[p]
                    assert bookie not in dead, (ledger_id, e, ensemble)
                    c = clients.setdefault(bookie, RawBookieClient(bookie, timeout_s=30))
                    status, got = c.read(ledger_id, e)
                    assert status == Status.OK and len(got) == 1, (ledger_id, e, bookie, status)
                    copies.add(got[0])
                assert len(copies) == 1, (ledger_id, e)
    finally:
        for c in clients.values():
            c.close()


def abandoned_open_ledger(uri, bookies, entries=20):
    """An OPEN ledger (E3/Qw2/Qa2) whose writer is gone: each entry on its whole write set."""
    from bookie import wire
    from bookie.client.digest import master_key, password_digest
    from bookie.metadata.ledger import LedgerMetadata
    with open_metadata(uri) as store:
        meta = LedgerMetadata(3, 2, 2, digest_type="dummy", password_digest=password_digest(b""),
                              fragments=[(0, list(bookies))])
        ledger_id, _ = store.create_ledger(meta)
    for e in range(entries):
        for p in write_set(e, 3, 2):
            with RawBookieClient(bookies[p], timeout_s=30) as c:
                entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"open-%d" % e)
                assert c.add(ledger_id, [entry], master_key(b"")) == Status.OK
    return ledger_id


def gappy_ledger(uri, bookies, entries=30):
    """A closed ledger (E3/Qw2/Qa1) whose entries are each on the first bookie of their write
    set only, as a writer leaves entries acked by Qa while it replaced a bookie."""
    from bookie import wire
    from bookie.client.digest import master_key, password_digest
    from bookie.metadata.ledger import LedgerMetadata, LedgerState
    with open_metadata(uri) as store:
        meta = LedgerMetadata(3, 2, 1, digest_type="dummy", password_digest=password_digest(b""),
                              fragments=[(0, list(bookies))])
        ledger_id, version = store.create_ledger(meta)
        for e in range(entries):
            first = bookies[write_set(e, 3, 2)[0]]
            with RawBookieClient(first, timeout_s=30) as c:
                entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"gap-%d" % e)
                assert c.add(ledger_id, [entry], master_key(b"")) == Status.OK
        meta.state, meta.last_entry_id = LedgerState.CLOSED, entries - 1
        store.write_ledger(ledger_id, meta, version)
    return ledger_id


def copies_complete(bk, ledger_ids, dead=frozenset()) -> bool:
    try:
        assert_every_entry_on_qw_live_copies(bk, ledger_ids, dead)
        return True
    except AssertionError:
        return False


def read_all(bk, ledger_ids, entries):
    for n, ledger_id in enumerate(ledger_ids):
        h = bk.open_ledger(ledger_id)
        got = [x.data for x in h.read_entries(0, h.last_add_confirmed)]
        assert len(got) == entries and got[0].startswith(f"{n}-0-".encode()), ledger_id


def heal_and_lose_a_second_bookie(uri, tmp_path, conf, ledgers=6):
    with LocalBookies(4, metadata_uri=uri, base_dir=str(tmp_path / "b"), conf=conf) as lb:
        try:
            with BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
                ids = write_ledgers(bk, ledgers)
                # a write quorum 1 ledger wholly on the victim: lost data, reported once
                victim = lb.bookies[0]
                for _ in range(50):
                    h = bk.create_ledger(1, 1, 1)
                    if bk.ledger_metadata(h.ledger_id).fragments[0][1] == [victim]:
                        break
                    h.close()
                    bk.delete_ledger(h.ledger_id)
                h.add_entry(b"only copy")
                h.close()
                q1 = h.ledger_id
                gap = gappy_ledger(lb.metadata_uri, lb.bookies[1:4])
                opened = abandoned_open_ledger(lb.metadata_uri, lb.bookies[0:3])
                assert not copies_complete(bk, [gap])
                lb.kill(0)
                wait_for(lambda: not any(names(bk, i, victim) for i in ids),
                         what=f"no ledger to name {victim}")
                assert_every_entry_on_qw_live_copies(bk, ids, {victim})
                # the open ledger, after the grace period: fenced, recovered (closed), healed
                wait_for(lambda: not names(bk, opened, victim), what="the open ledger healed")
                assert bk.ledger_metadata(opened).is_closed
                assert bk.ledger_metadata(opened).last_entry_id >= 18  # the last may be unconfirmed
                assert_every_entry_on_qw_live_copies(bk, [opened], {victim})
                with open_metadata(lb.metadata_uri) as store:
                    ur = UnderReplication(store)
                    wait_for(lambda: q1 in ur.lost(), what="the Qw=1 ledger reported lost")
                    wait_for(lambda: ur.marks() == {}, what="no mark left")
                    time.sleep(3)  # several auditor and worker rounds: not marked again
                    assert ur.marks() == {} and list(ur.lost()) == [q1]
                    # the writer's gap: an entry check (triggered) gives each entry Qw copies
                    ur.trigger_audit()
                    wait_for(lambda: copies_complete(bk, [gap], {victim}),
                             what="every entry of the gappy ledger on Qw bookies")
                logs = "".join(lb.log(i) for i in range(1, 4))
                assert logs.count(f"ledger lost entries: no live copy to heal from ledger_id={q1}") == 1
                # a second loss now loses nothing: every entry still has a live copy
                lb.kill(1)
                read_all(bk, ids, 40)
        except BaseException:
            dump_logs(lb)
            raise


@pytest.mark.autorecovery_slow  # ~35 s: over the default run's budget for this feature
def test_a_bookie_killed_for_good_is_replaced_and_a_second_loss_loses_nothing(tmp_path):
    heal_and_lose_a_second_bookie(None, tmp_path, FAST)


@pytest.mark.autorecovery_slow
def test_a_bookie_killed_for_good_is_replaced_on_zookeeper(tmp_path, zk_uri):
    heal_and_lose_a_second_bookie(zk_uri, tmp_path, FAST)


@pytest.mark.autorecovery_slow
def test_a_bookie_back_before_the_delay_costs_no_copy(tmp_path):
    conf = {**FAST, "lostBookieRecoveryDelay": "30"}
    with LocalBookies(4, base_dir=str(tmp_path / "b"), conf=conf) as lb:
        try:
            with BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
                ids = write_ledgers(bk, 4)
                before = {i: bk.ledger_metadata(i).fragments for i in ids}
                lb.kill(2)
                time.sleep(3)
                lb.start(2)
                time.sleep(8)  # several auditor rounds after the bookie is back
                assert {i: bk.ledger_metadata(i).fragments for i in ids} == before
                with open_metadata(lb.metadata_uri) as store:
                    assert UnderReplication(store).marks() == {}
                assert not any("ledger re-replicated" in lb.log(i) for i in range(4))
        except BaseException:
            dump_logs(lb)
            raise


def _auditor_pid(store) -> int:
    found = UnderReplication(store).auditor()
    return int(found[1].rsplit("/", 1)[1]) if found else 0


@pytest.mark.autorecovery_slow
def test_the_auditor_sigkilled_is_taken_over(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b"), conf=FAST) as lb:
        try:
            with open_metadata(lb.metadata_uri) as store, BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
                first = wait_for(lambda: _auditor_pid(store), what="an auditor")
                os.kill(first, signal.SIGKILL)
                second = wait_for(lambda: (_auditor_pid(store) not in (0, first))
                                  and _auditor_pid(store), what="another auditor")
                assert second != first
                ids = write_ledgers(bk, 3)
                victim = 3  # whether or not it hosts the new auditor: a third takes over
                dead = lb.bookies[victim]
                lb.kill(victim)
                wait_for(lambda: not any(names(bk, i, dead) for i in ids),
                         what=f"no ledger to name {dead}")
        except BaseException:
            dump_logs(lb)
            raise


@pytest.mark.autorecovery_slow
def test_a_replication_worker_sigkilled_mid_ledger_leaves_it_to_another(tmp_path):
    conf = {**FAST, "replicationRateByBytes": "100000", "rereplicationEntryBatchSize": "5"}
    with LocalBookies(5, base_dir=str(tmp_path / "b"), conf=conf) as lb:
        try:
            with open_metadata(lb.metadata_uri) as store, BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
                ur = UnderReplication(store)
                h = bk.create_ledger(3, 2, 2)
                for e in range(300):
                    h.add_entry(b"%d-" % e + b"y" * 10_000)  # ~2 MB to copy at 100 kB/s
                h.close()
                victim = bk.ledger_metadata(h.ledger_id).fragments[0][1][0]
                lb.kill(lb.bookies.index(victim))
                holder = wait_for(lambda: ur.lock_holder(h.ledger_id), what="a worker on it")
                time.sleep(2)  # mid-copy
                os.kill(int(holder.rsplit("/", 1)[1]), signal.SIGKILL)
                wait_for(lambda: (ur.lock_holder(h.ledger_id) or holder) != holder,
                         what="another worker to take the ledger")
                wait_for(lambda: not names(bk, h.ledger_id, victim), timeout_s=300,
                         what="the ledger healed")
                assert_every_entry_on_qw_live_copies(bk, [h.ledger_id], {victim})
        except BaseException:
            dump_logs(lb)
            raise
