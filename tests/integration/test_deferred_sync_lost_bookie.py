"""A DEFERRED_SYNC writer that loses a bookie goes on (issue 39 item 4), on real bookies: it
replaces the bookie (an ensemble change from its last forced entry), keeps acknowledging adds,
and its next ``force()`` and ``close()`` succeed without asking the lost bookie; the entries
acknowledged but not forced that the lost bookie held are written again to its replacement.
Every acknowledged entry reads back from the closed ledger, after the surviving bookies were
killed (SIGKILL) and started again: what force() made the LAC is durable.
"""

from __future__ import annotations

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
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
