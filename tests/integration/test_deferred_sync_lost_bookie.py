"""A DEFERRED_SYNC writer that loses a bookie goes on (issue 39 item 4), on real bookies: it
replaces the bookie (an ensemble change from its last forced entry), keeps acknowledging adds,
and its next ``force()`` and ``close()`` succeed without asking the lost bookie; the entries
acknowledged but not forced that the lost bookie held are written again to its replacement.
Every acknowledged entry reads back from the closed ledger, after the surviving bookies were
killed (SIGKILL) and started again: what force() made the LAC is durable.
"""

from __future__ import annotations

import signal

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
from bookie_logs import dumped

PW = b"pw"


def test_a_deferred_writer_that_loses_a_bookie_forces_and_closes_and_loses_nothing():
    with dumped(LocalBookies(3)) as lb:
        with BookKeeper(lb.metadata_uri) as bk:
            lh = bk.create_ledger(2, 2, 2, password=PW, write_flags=["deferred_sync"])
            want = [b"d%d" % e for e in range(5)]
            for data in want:
                lh.add_entry(data)  # acknowledged, not forced
            assert lh.last_add_confirmed == -1
            lost = lb.bookies.index(lh.metadata.fragments[0][1][1])
            lb.kill(lost)
            for e in range(5, 10):  # the adds go on: the writer replaces the lost bookie
                want.append(b"d%d" % e)
                lh.add_entry(want[-1])
            assert lh.last_add_confirmed == -1  # nothing forced yet: the LAC does not move
            assert lh.force(60.0) == 9 and lh.last_add_confirmed == 9
            ensembles = [set(ens) for _, ens in bk.ledger_metadata(lh.ledger_id).fragments]
            assert lb.bookies[lost] not in ensembles[-1]
            want.append(b"d10")
            lh.add_entry(want[-1])
            lh.close()  # forces first
            assert bk.ledger_metadata(lh.ledger_id).last_entry_id == 10
        for i in range(lb.n):  # what was forced is durable: SIGKILL and start the others again
            if i != lost:
                lb.kill(i)
                lb.start(i)
        with BookKeeper(lb.metadata_uri) as bk:
            rh = bk.open_ledger(lh.ledger_id, password=PW)
            assert [bytes(e.data) for e in rh.read_entries(0, 10)] == want


def test_a_force_answered_by_a_bookie_restarted_under_the_writer_covers_every_replica():
    """A bookie acknowledges deferred adds, is SIGKILLed before its journal synced them and
    starts again on its address, perhaps before the writer notices (nothing was outstanding; over
    a local socket the writer does notice and replaces it), then the force.  A force that returned N must mean every replica the metadata
    names for every entry up to N holds it: after the force, every replica is asked.  (A
    process kill leaves the entry log's and the index's writes in the page cache, so the
    restarted bookie still holds them; a power loss would not: see docs/protocol.md.)"""
    with dumped(LocalBookies(3)) as lb:  # a spare: a writer that notices the restart replaces
        with BookKeeper(lb.metadata_uri) as bk:
            lh = bk.create_ledger(2, 2, 2, password=PW, write_flags=["deferred_sync"])
            lh.add_entry(b"d0")
            assert lh.force(60.0) == 0
            journal = lb.kill_worker(0, "journal", signal.SIGSTOP)
            want = [b"d0"] + [lh.add_entry(b"d%d" % e) and b"d%d" % e for e in range(1, 6)]
            lb.kill(0)  # never synced d1..d5: the journal was stopped
            del journal
            lb.start(0)
            forced = lh.force(60.0)
            assert forced == 5, forced
            lid = lh.ledger_id
            fragments = bk.ledger_metadata(lid).fragments
        for i, (start, ensemble) in enumerate(fragments):
            end = fragments[i + 1][0] - 1 if i + 1 < len(fragments) else forced
            for bookie_id in ensemble:
                with RawBookieClient(bookie_id) as raw:
                    for e in range(start, end + 1):
                        status, got = raw.read(lid, e)
                        assert (status, got) == (Status.OK, [want[e]]) or \
                            (status == Status.OK and got and got[0].endswith(want[e])), \
                            (bookie_id, e, status, got)
