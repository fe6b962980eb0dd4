"""The nemesis's ``rename`` fault on real bookies, autorecovery on (issue 39): the documented
rename with a write-quorum-1 writer of the fault's own kept open throughout; afterwards the
writer goes on, closes, and every entry it was acknowledged reads back (no finding)."""

from __future__ import annotations

import time

from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from bookie.testing.nemesis.faults import Nemesis
from bookie_logs import dumped

CONF = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "0"}


def test_the_rename_fault_keeps_its_open_write_quorum_1_ledger_whole(tmp_path):
    lines: list[str] = []
    with dumped(LocalBookies(3, base_dir=str(tmp_path / "b"), conf=CONF,
                             bookie_ids=["nemesis-b0", "nemesis-b1", "nemesis-b2"])) as lb:
        nemesis = Nemesis(lb, log=lines.append)
        nemesis._rename(0)
        deadline = time.monotonic() + 400
        while not any("read back" in line for line in lines) and not nemesis.findings:
            assert time.monotonic() < deadline, lines
            nemesis.tick()
            time.sleep(0.5)
        assert nemesis.findings == [], (nemesis.findings, lines)
        assert lb.bookies[0] == "nemesis-b0-n1" and nemesis.renamed_ids == ["nemesis-b0"]
        with open_metadata(lb.metadata_uri) as store:
            for ledger_id in store.list_ledgers():
                meta = store.read_ledger(ledger_id)[0]
                assert all("nemesis-b0" not in ens for _, ens in meta.fragments)
