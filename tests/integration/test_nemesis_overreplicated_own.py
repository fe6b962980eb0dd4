"""The nemesis's ``overreplicated`` fault is never skipped for want of a closed ledger (issue 32).

Its pick looks for a closed ledger with entries that leaves a running bookie out; in a 240 s
run the first round has none yet and the deleter takes the earlier rounds', so it was skipped
in every round of seed 35.  It now writes a closed ledger of its own and picks from that.
Real bookies (LocalBookies), the nemesis's own code.
"""

from __future__ import annotations

import random

import pytest

from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerState
from bookie.testing import LocalBookies
from bookie.testing.nemesis.faults import Nemesis


def test_overreplicated_writes_a_closed_ledger_of_its_own_when_none_fits(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb:
        nemesis = Nemesis(lb, log=lambda line: None)
        with pytest.raises(Exception, match="none leaves a running bookie out"):
            nemesis._overreplicated_pick(0, random.Random(1))  # nothing seen: the old skip
        own = nemesis._overreplicated_ledger()
        ledger_id, first, position, bookie, j = nemesis._overreplicated_pick(
            0, random.Random(1), [own])
        assert ledger_id == own and first == 0
        with open_metadata(lb.metadata_uri) as store:
            meta = store.read_ledger(own)[0]
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 19
        ensemble = meta.fragments[0][1]
        assert ensemble[position] == bookie and lb.bookies[j] not in ensemble
