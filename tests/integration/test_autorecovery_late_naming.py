"""A ledger that comes to name a lost bookie after the auditor's pass is healed all the same
(issue 32, item 1), with real bookies and the autorecovery daemon in each.

The auditor marks the ledgers a full pass lists; a pass ran on a change of membership only.  A
ledger whose metadata names a bookie already lost when that pass ran (a client with a stale list
of bookies changed it, or it was listed a moment late) kept one copy of its entries: the nemesis
found one 120 s after a bookie was lost for good.  The auditor now repeats its pass every
``LOST_RECHECK_S`` after a loss.  Here the late naming is made by hand: a closed (2, 2, 2)
ledger on A and B is rewritten, after D is lost and the pass has run, to name D in B's place.
"""

from __future__ import annotations

import time

from bookie import wire
from bookie.client.digest import master_key, password_digest
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status
import waiting

CONF = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "0",
        "openLedgerRereplicationGracePeriod": "1000", "gcWaitTime": "600000",
        "zkTimeout": "4000"}
ENTRIES = 10
BOUND_S = 60.0  # the recheck comes within 10 s; generous for a shared, loaded machine


def test_a_ledger_naming_a_lost_bookie_after_the_pass_gets_its_second_copy_back(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b"), conf=CONF) as lb:
        # D is not the auditor (a new one never saw D registered: it finds D lost only
        # through a ledger naming it, at its own rechecks after its election)
        auditor = waiting.wait_for(lambda: [i for i in range(4) if "elected auditor" in lb.log(i)],
                                   30, "an auditor")[0]
        spare = [i for i in range(4) if i != auditor]
        a, b, d = (lb.bookies[i] for i in spare[:3])
        d_slot = spare[2]
        with open_metadata(lb.metadata_uri) as store:
            meta = LedgerMetadata(2, 2, 2, digest_type="dummy",
                                  password_digest=password_digest(b""), fragments=[(0, [a, b])])
            ledger_id, version = store.create_ledger(meta)
            for bookie in (a, b):
                with RawBookieClient(bookie, timeout_s=30) as c:
                    for e in range(ENTRIES):
                        entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"late-%d" % e)
                        assert c.add(ledger_id, [entry], master_key(b"")) == Status.OK
            meta.state, meta.last_entry_id = LedgerState.CLOSED, ENTRIES - 1
            version = store.write_ledger(ledger_id, meta, version)
            lb.kill(d_slot)
            # the auditor's pass for D's loss has run (it found nothing naming D)
            waiting.wait_for(lambda: any("bookies lost" in lb.log(i) for i in range(4) if i != d_slot), 60,
                             "the auditor's pass for the lost bookie")
            time.sleep(1.0)
            meta, version = store.read_ledger(ledger_id)
            meta.fragments = [(0, [a, d])]  # a late change names D where B was
            store.write_ledger(ledger_id, meta, version)

            def healed():
                ensemble = store.read_ledger(ledger_id)[0].fragments[0][1]
                return d not in ensemble and ensemble

            ensemble = waiting.wait_for(healed, BOUND_S, "the ledger healed around D")
        for bookie in ensemble:  # every entry on both bookies of its write set again
            with RawBookieClient(bookie, timeout_s=30) as c:
                for e in range(ENTRIES):
                    status, _ = c.read(ledger_id, e)[:2]
                    assert Status(status) == Status.OK, (bookie, e, status)
