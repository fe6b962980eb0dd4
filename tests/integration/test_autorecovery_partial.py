"""Autorecovery plans per entry range, and leaves a writer that healed itself alone (issue 21,
defects 2 and 3), with real bookies and the autorecovery daemon in each.

* Partial loss: a closed (3, 2, 2) ledger of 30 entries on A, B, C; B and C die together.
  The 10 entries whose both copies were on B and C are gone, but the 20 others still have a
  copy on A.  The ledger is reported lost once and never marked again, and B and C stay named
  while they may come back (their cookies are in the store): when they do, every entry reads.
* Partial loss, then one of the two is gone for good (its cookie removed by an operator):
  what has a copy on A is copied and that bookie's position repointed (``core.naming``); the
  other, whose cookie is still there, stays named.
* A writer on (3, 2, 2) loses a bookie, replaces it itself and writes on: autorecovery copies
  its first fragment without fencing it, and the writer's adds go on past
  ``openLedgerRereplicationGracePeriod``.
* A fragment of one entry names a lost bookie at a position that entry never went to (the
  writer replaced it at the next entry): the auditor marks it and a worker repoints it without
  a copy.

The lost ledger is counted once in ``bookie_autorecovery_lost_ledgers_total`` (reported by the
auditor, healed by a worker). Opt-in (``-m autorecovery_slow``): each waits out a recovery delay
and a grace period.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from bookie import wire
from bookie.client import BookKeeper
from bookie.client.digest import master_key, password_digest
from bookie.client.protocol.quorum import write_set
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
from bookie_logs import dumped
import waiting

FAST = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "2",
        "openLedgerRereplicationGracePeriod": "1000", "gcWaitTime": "600000",
        "zkTimeout": "4000"}
BOUND_S = 120.0  # generous: the machine is shared and loaded


def _closed_ledger(uri, bookies, entries=30, quorum=(3, 2, 2)) -> int:
    """A closed ledger (of ``quorum``, (3, 2, 2) unless told) on ``bookies``, every entry on
    its whole write set."""
    E, Qw, Qa = quorum
    with open_metadata(uri) as store:
        meta = LedgerMetadata(E, Qw, Qa, digest_type="dummy", password_digest=password_digest(b""),
                              fragments=[(0, list(bookies))])
        ledger_id, version = store.create_ledger(meta)
        for e in range(entries):
            for p in write_set(e, E, Qw):
                with RawBookieClient(bookies[p], timeout_s=30) as c:
                    entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"part-%d" % e)
                    assert c.add(ledger_id, [entry], master_key(b"")) == Status.OK
        meta.state, meta.last_entry_id = LedgerState.CLOSED, entries - 1
        store.write_ledger(ledger_id, meta, version)
    return ledger_id


def _lost_ledgers_counted(lb, bookies) -> float:
    """``bookie_autorecovery_lost_ledgers_total`` summed over ``bookies`` (their /metrics)."""
    total = 0.0
    for i in bookies:
        with urllib.request.urlopen(f"{lb.admin_url(i)}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("bookie_autorecovery_lost_ledgers_total"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def _names_any(store, ledger_id, bookies) -> bool:
    meta, _ = store.read_ledger(ledger_id)
    return any(b in ens for _, ens in meta.fragments for b in bookies)


@pytest.mark.autorecovery_slow
def test_a_partial_loss_is_reported_once_and_never_cuts_off_a_bookie_that_comes_back(tmp_path):
    # B and C die together: the entries whose write set is {B, C} have no live copy.  The ledger
    # is reported lost once and not marked again; the positions holding those entries keep
    # naming B and C (repointed, a bookie that was only down would lose them for good: the
    # nemesis found that), so when B and C come back every entry reads again.
    with dumped(LocalBookies(5, base_dir=str(tmp_path / "b"), conf=FAST,
                              admin_http=True)) as lb:
        a, b, c = lb.bookies[:3]
        ledger_id = _closed_ledger(lb.metadata_uri, [a, b, c])
        lb.kill(1)
        lb.kill(2)
        with open_metadata(lb.metadata_uri) as store:
            ur = UnderReplication(store)
            waiting.wait_for(lambda: ledger_id in ur.lost(), BOUND_S, "reported lost")
            waiting.wait_for(lambda: ur.marks() == {}, BOUND_S, "no mark left")
            time.sleep(3)  # several auditor and worker rounds: never marked again
            assert ur.marks() == {} and list(ur.lost()) == [ledger_id]
            assert _names_any(store, ledger_id, {b, c})
        logs = "".join(lb.log(i) for i in (0, 3, 4))
        assert logs.count(f"ledger lost entries: no live copy to heal from "
                          f"ledger_id={ledger_id}") == 1
        lb.start(1)
        lb.start(2)
        with open_metadata(lb.metadata_uri) as store:
            meta, _ = store.read_ledger(ledger_id)
        ensemble = meta.fragments[0][1]
        for e in range(30):  # every entry on a bookie its metadata names for it
            found = False
            for p in write_set(e, 3, 2):
                with RawBookieClient(ensemble[p], timeout_s=30) as cl:
                    status, got = cl.read(ledger_id, e)
                    found = found or (status == Status.OK and got[0].endswith(b"part-%d" % e))
            assert found, e


@pytest.mark.autorecovery_slow
def test_a_writer_that_replaced_a_lost_bookie_itself_is_never_fenced(tmp_path):
    with dumped(LocalBookies(5, base_dir=str(tmp_path / "b"), conf=FAST)) as lb:
        with BookKeeper(lb.metadata_uri, {"addEntryTimeout": 2.0, "readTimeout": 2.0},
                        allowEmptyPassword=True) as bk:
            lh = bk.create_ledger(3, 2, 2)
            for i in range(10):
                lh.add_entry(b"w%d" % i, timeout_s=30)
            victim = lh.metadata.fragments[0][1][1]
            lb.kill(lb.bookies.index(victim))
            n = 10
            deadline = time.monotonic() + 25  # delay 2 s + grace 1 s, many times over
            healed_at = None
            while time.monotonic() < deadline:
                lh.add_entry(b"w%d" % n, timeout_s=30)  # LedgerFencedError: the defect
                n += 1
                time.sleep(0.05)
                frags = bk.ledger_metadata(lh.ledger_id).fragments
                if healed_at is None and not any(victim in e for _, e in frags):
                    healed_at = n
            assert len(lh.metadata.fragments) > 1  # the writer replaced the bookie itself
            assert healed_at is not None, "the first fragment was never healed"
            assert not bk.ledger_metadata(lh.ledger_id).is_closed
            lh.close(timeout_s=30)
            rh = bk.open_ledger(lh.ledger_id)
            assert [x.data for x in rh.read_entries(0, n - 1)] == [b"w%d" % i for i in range(n)]


@pytest.mark.autorecovery_slow
def test_a_partial_loss_is_healed_once_the_lost_bookie_is_gone_for_good(tmp_path):
    # Issue 21 defect 2, redesigned: B and C die together; the entries only they held (e % 3 ==
    # 1) are gone, the others have one copy, on A.  While a cookie is in the store its bookie
    # may come back, so its position stays (the test above).  An operator removes B's cookie
    # (``cookie_delete``: its disk is gone); the auditor sees B gone for good, the entries of
    # B's position that A holds (e % 3 == 0) are copied to the spare D and B's position
    # repointed, while C (its cookie still there) stays named.  When A dies too, those entries
    # still read back from D.  Without core.naming's "gone for good", nothing is ever copied.
    with dumped(LocalBookies(4, base_dir=str(tmp_path / "b"), conf=FAST)) as lb:
        a, b, c, d = lb.bookies
        ledger_id = _closed_ledger(lb.metadata_uri, [a, b, c])
        lb.kill(1)
        lb.kill(2)
        with open_metadata(lb.metadata_uri) as store:
            ur = UnderReplication(store)
            waiting.wait_for(lambda: ledger_id in ur.lost(), BOUND_S, "reported lost")
            assert _names_any(store, ledger_id, {b, c})
            store.remove_cookie(b)  # what ``bookie shell cookie_delete B -force`` does
            waiting.wait_for(lambda: not _names_any(store, ledger_id, {b}), BOUND_S,
                             "B no longer named")
            time.sleep(2)  # more auditor and worker rounds: C stays named
            meta, _ = store.read_ledger(ledger_id)
        lb.kill(0)
        assert meta.fragments[0][1] == [a, d, c]
        for e in range(0, 30, 3):  # write set {A, B}, now {A, D}
            with RawBookieClient(d, timeout_s=30) as cl:
                status, got = cl.read(ledger_id, e)
            assert status == Status.OK and got[0].endswith(b"part-%d" % e), e


@pytest.mark.autorecovery_slow
def test_autorecovery_replaces_a_lost_bookie_by_the_placement_policy(tmp_path):
    # Issue 24 item 1, last clause: racks one (A, C, E) and two (B, D), set by the operator;
    # six (2, 2, 2) ledgers on (A, B); B dies.  With ensemblePlacementPolicy=rackaware every
    # ledger's replacement is D, the only other bookie of rack two; at random all six would be
    # D once in 729.
    conf = dict(FAST, ensemblePlacementPolicy="rackaware")
    with dumped(LocalBookies(5, base_dir=str(tmp_path / "b"), conf=conf)) as lb:
        a, b, c, d, e = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            for bookie, rack in ((a, "/r/one"), (b, "/r/two"), (c, "/r/one"),
                                 (d, "/r/two"), (e, "/r/one")):
                store.create(f"/bookielocations/{bookie}", rack.encode())
        ledgers = [_closed_ledger(lb.metadata_uri, [a, b], entries=4, quorum=(2, 2, 2))
                   for _ in range(6)]
        lb.kill(1)
        with open_metadata(lb.metadata_uri) as store:
            waiting.wait_for(lambda: not any(_names_any(store, i, {b}) for i in ledgers),
                             BOUND_S, "B replaced in every ledger")
            assert [store.read_ledger(i)[0].fragments[0][1] for i in ledgers] == [[a, d]] * 6


@pytest.mark.autorecovery_slow
def test_a_closed_ledger_with_no_entries_stops_naming_a_lost_bookie(tmp_path):
    # The nemesis (seed 777, --lifecycle) found closed ledgers with no entries still naming a
    # bookie lost for good after every round: the auditor marked a ledger only when it had
    # entries to copy, and an empty fragment has none.  Repointed without a copy, it loses
    # nothing (core.naming: every entry it should hold - none - is on the replacement).
    with dumped(LocalBookies(4, base_dir=str(tmp_path / "b"), conf=FAST)) as lb:
        a, b, c, d = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            meta = LedgerMetadata(3, 2, 2, digest_type="dummy",
                                  password_digest=password_digest(b""),
                                  fragments=[(0, [a, b, c])], state=LedgerState.CLOSED,
                                  last_entry_id=-1)
            ledger_id = store.create_ledger(meta)[0]
        lb.kill(1)
        with open_metadata(lb.metadata_uri) as store:
            waiting.wait_for(lambda: not _names_any(store, ledger_id, {b}), BOUND_S,
                             "the empty ledger no longer names B")
            assert store.read_ledger(ledger_id)[0].fragments == [(0, [a, d, c])]


@pytest.mark.autorecovery_slow
def test_a_lost_bookie_at_a_position_its_fragment_never_wrote_to_stops_being_named(tmp_path):
    # The nemesis (seed 777, ledger 147 of its log): a writer on (3, 2, 2) over A, B, C whose
    # C had just died wrote entry 0 to A and B (its write set) and replaced C at entry 1, the
    # first entry whose write set holds C's position.  Fragment 0 still named C, holding nothing
    # there; the auditor found nothing to copy and nothing lost, never marked it, and the
    # ledger named the lost bookie for five minutes, until other losses marked it.  Repointed
    # without a copy, nothing is lost (no entry of fragment 0 was ever on that position).
    with dumped(LocalBookies(4, base_dir=str(tmp_path / "b"), conf=FAST)) as lb:
        a, b, c, d = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            meta = LedgerMetadata(3, 2, 2, digest_type="dummy",
                                  password_digest=password_digest(b""),
                                  fragments=[(0, [a, b, c]), (1, [a, b, d])])
            ledger_id, version = store.create_ledger(meta)
            for e in range(12):
                ensemble = [a, b, c] if e == 0 else [a, b, d]
                for p in write_set(e, 3, 2):
                    with RawBookieClient(ensemble[p], timeout_s=30) as raw:
                        entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"pos-%d" % e)
                        assert raw.add(ledger_id, [entry], master_key(b"")) == Status.OK
            meta.state, meta.last_entry_id = LedgerState.CLOSED, 11
            store.write_ledger(ledger_id, meta, version)
        lb.kill(2)
        with open_metadata(lb.metadata_uri) as store:
            waiting.wait_for(lambda: not _names_any(store, ledger_id, {c}), BOUND_S,
                             "fragment 0 no longer names C")
            assert store.read_ledger(ledger_id)[0].fragments == [(0, [a, b, d]), (1, [a, b, d])]
            assert UnderReplication(store).lost() == {}  # nothing was lost
        with BookKeeper(lb.metadata_uri) as bk:
            got = [x.data for x in bk.open_ledger(ledger_id, digest="dummy", password=b"",
                                                  recovery=False).read_entries(0, 11)]
            assert got == [b"pos-%d" % e for e in range(12)]
