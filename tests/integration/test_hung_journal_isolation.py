"""One hung journal holds back no other (issue 31, item 2), on a real bookie with two journals.

Ledger 3's records go to journal 1, ledger 2's to journal 0 (ledger_id % 2).  Journal 1's worker
is stopped (SIGSTOP) and adds to ledger 3 fill its ring: the add worker must go on reading
requests, so adds, explicit LACs and fences of ledger 2 are answered at once, and ledger 3's
adds are all answered, in order, once journal 1 runs again.
"""

from __future__ import annotations

import os
import signal
import time

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"hung-journal-key"
HEALTHY, HUNG = 2, 3  # journal 0, journal 1


def test_a_hung_journal_with_a_full_ring_holds_back_no_ledger_of_another_journal():
    conf = {"metadataServiceUri": "", "journalRingSizeMB": 1}
    with LocalBookies(1, journals=2, conf=conf) as ens:
        # A generous timeout: held back behind the hung journal, the healthy ledger's requests
        # would wait until SIGCONT, and end TIMEOUT, not OK.
        with RawBookieClient(ens.bookies[0], timeout_s=60) as c:
            assert c.add(HEALTHY, [make_entry(HEALTHY, 0, b"h0")], KEY) == Status.OK
            assert c.add(HUNG, [make_entry(HUNG, 0, b"u0")], KEY) == Status.OK
            hung = ens.kill_worker(0, "journal-1", signal.SIGSTOP)
            try:
                big = os.urandom(100_000)
                sent = [c.send_add(HUNG, [make_entry(HUNG, i, big)], KEY) for i in range(1, 16)]
                time.sleep(0.5)  # more than the 1 MB ring holds: the last ones wait for room
                assert c.add(HEALTHY, [make_entry(HEALTHY, 1, b"h1")], KEY) == Status.OK
                assert c.write_lac(HEALTHY, 1, KEY) == Status.OK
                assert c.fence(HEALTHY, KEY) == Status.OK
            finally:
                os.kill(hung, signal.SIGCONT)
            answers = []
            for rid in sent:
                status, _ = c.wait(c.add_sock, rid)
                answers.append(status)
            assert answers == [Status.OK] * len(sent)
            status, entries = c.read(HUNG, 0, 16)
            assert status == Status.OK and len(entries) == 16
            assert entries[15] == make_entry(HUNG, 15, big)
            assert c.add(HEALTHY, [make_entry(HEALTHY, 2, b"h2")], KEY) == Status.FENCED
