"""Autorecovery of bookies known by a ``bookieId``: the auditor sees the lost bookie by its id
leaving the registrations, the replication workers reach the survivors through their
registrations (their addresses are not their ids), and every entry ends on Qw live bookies
that hold it byte for byte.  Opt-in (``-m autorecovery_slow``): four bookies and the waits of a
loss, as tests/integration/test_autorecovery.py.
"""

from __future__ import annotations

import pytest

from bookie.client import BookKeeper
from bookie.client.protocol.quorum import write_set
from bookie.client.resolver import BookieResolver
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
import waiting

FAST = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "2",
        "openLedgerRereplicationGracePeriod": "1000", "gcWaitTime": "600000",
        "zkTimeout": "4000"}
IDS = ["bk-0", "bk-1", "bk-2", "bk-3"]
BOUND_S = 180.0


def entries_on_live_copies(store, bk, ledger_ids, dead) -> None:
    """Each entry read from each bookie of its write set (reached by id): the same bytes."""
    resolver = BookieResolver(store)
    clients: dict[str, RawBookieClient] = {}
    try:
        for ledger_id in ledger_ids:
            meta = bk.ledger_metadata(ledger_id)
            for e in range(meta.last_entry_id + 1):
                ensemble = meta.ensemble_for(e)
                copies = set()
                for p in write_set(e, meta.ensemble_size, meta.write_quorum):
                    bookie = ensemble[p]
                    assert bookie not in dead and bookie in IDS, (ledger_id, e, ensemble)
                    c = clients.setdefault(bookie, RawBookieClient(bookie, timeout_s=30,
                                                                   resolver=resolver))
                    status, got = c.read(ledger_id, e)
                    assert status == Status.OK and len(got) == 1, (ledger_id, e, bookie, status)
                    copies.add(got[0])
                assert len(copies) == 1, (ledger_id, e)
    finally:
        for c in clients.values():
            c.close()
        resolver.close()


@pytest.mark.autorecovery_slow
def test_a_lost_id_named_bookie_is_detected_by_its_id_and_healed(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b"), conf=FAST, bookie_ids=IDS) as lb:
        try:
            with open_metadata(lb.metadata_uri) as store, \
                    BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as bk:
                ids = []
                for n in range(4):
                    h = bk.create_ledger(3, 2, 2)
                    for e in range(30):
                        h.add_entry(b"%d-%d-" % (n, e) + b"z" * 100)
                    h.close()
                    ids.append(h.ledger_id)
                victim = "bk-0"
                assert any(victim in ens for i in ids
                           for _, ens in bk.ledger_metadata(i).fragments)
                lb.kill(IDS.index(victim))

                def healed():
                    return not any(victim in ens for i in ids
                                   for _, ens in bk.ledger_metadata(i).fragments)
                waiting.wait_for(healed, BOUND_S, f"no ledger to name {victim}", step_s=0.2)
                entries_on_live_copies(store, bk, ids, {victim})
                waiting.wait_for(lambda: UnderReplication(store).marks() == {}, BOUND_S,
                                 "no mark left", step_s=0.2)
                for n, ledger_id in enumerate(ids):
                    got = [x.data for x in bk.open_ledger(ledger_id).read_entries(0, 29)]
                    assert got == [b"%d-%d-" % (n, e) + b"z" * 100 for e in range(30)]
                logs = "".join(lb.log(i) for i in range(1, 4))
                assert "ledger re-replicated" in logs
        except BaseException:
            for i in range(lb.n):
                print(f"--- bookie {i} ({lb.bookies[i]}) log tail ---\n{lb.log(i)[-4000:]}")
            raise
