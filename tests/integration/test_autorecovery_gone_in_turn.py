"""A partly lost ledger is healed once its lost bookies are declared gone, one after the other
(issue 32, item 7), with real bookies and the autorecovery daemon in each.

E3/Qw2 on A, B, C; B and C SIGKILLed; the entries whose write set is {B, C} are lost, the others
have one copy, on A.  ``cookie_delete -force`` of B, then of C.  B's position is healed first:
its entries that A holds are copied to a spare D and B repointed to D.  Then C's: the write set
{D, C} of the lost entries now names D, which never held them (they had no copy to give), so the
copy found nothing there, gave up on the whole position and never copied the entries of {C, A}
that A does hold: they kept one copy for good (2 of 3 runs of the issue, depending on whether
the auditor saw both cookies go in one round).  Now a copy skips entries no live member holds
when the bookie healed around is gone for good (they are lost whatever the metadata says),
copies the rest and repoints.  About 20 s (two recovery delays).
"""

from __future__ import annotations

from bookie.client.protocol.quorum import write_set
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
import waiting
from test_autorecovery_partial import BOUND_S, FAST, _closed_ledger, _names_any
from bookie_logs import dumped as _dumped


def _copies(ledger_id: int, ensemble, e: int) -> int:
    n = 0
    for p in write_set(e, 3, 2):
        with RawBookieClient(ensemble[p], timeout_s=30) as c:
            status, got = c.read(ledger_id, e)
            n += status == Status.OK and got[0].endswith(b"part-%d" % e)
    return n


def test_a_partial_loss_is_healed_when_its_lost_bookies_are_declared_gone_one_after_the_other(tmp_path):
    with _dumped(LocalBookies(5, base_dir=str(tmp_path / "b"), conf=FAST)) as lb:
        a, b, c = lb.bookies[:3]
        ledger_id = _closed_ledger(lb.metadata_uri, [a, b, c])
        lb.kill(1)
        lb.kill(2)
        with open_metadata(lb.metadata_uri) as store:
            ur = UnderReplication(store)
            waiting.wait_for(lambda: ledger_id in ur.lost(), BOUND_S, "reported lost")
            store.remove_cookie(b)  # bookie shell cookie_delete B -force
            waiting.wait_for(lambda: not _names_any(store, ledger_id, {b}), BOUND_S, "B unnamed")
            store.remove_cookie(c)
            waiting.wait_for(lambda: not _names_any(store, ledger_id, {c}), BOUND_S, "C unnamed")
            meta, _ = store.read_ledger(ledger_id)
        ensemble = meta.fragments[-1][1]
        assert len(meta.fragments) == 1 and a in ensemble
        thin = [e for e in range(30) if e % 3 != 1 and _copies(ledger_id, ensemble, e) < 2]
        assert not thin, f"entries with one copy although A held them: {thin}"
