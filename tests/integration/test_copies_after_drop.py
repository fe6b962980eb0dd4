"""Copies re-sent after an over-replicated drop stay held (issue 32, item 1), on real bookies.

The GC of bookie B drops its copies of a closed ledger whose metadata names it nowhere; the
ledger is later healed onto B again (the metadata names B, the copies arrive as recovery adds).
Compaction must count those copies live and keep them (``bookie.core.ledgers`` invariant 9),
and the fence B held before the drop must still refuse a normal add after a restart.
"""

from __future__ import annotations

import subprocess
import sys

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import LedgerState
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
import waiting

KEY = b"copies-after-drop-key"
CONF = {"gcWaitTime": "300", "gcOverreplicatedLedgerWaitTime": "1500", "flushInterval": "50",
        "logSizeLimit": str(128 * 1024), "entryLogFilePreallocationEnabled": "false",
        "compactionRateByEntries": "0", "minorCompactionInterval": "0",
        "majorCompactionInterval": "0"}
N = 20


def _payload(ledger_id: int, entry_id: int) -> bytes:
    return (b"%d/%d:" % (ledger_id, entry_id)) * 40


def _put(c, ledger_id, entries, recovery=False):
    for e in entries:
        status = c.add(ledger_id, [make_entry(ledger_id, e, _payload(ledger_id, e))], KEY, recovery=recovery)
        assert status == Status.OK, (ledger_id, e, status)


def _reads_back(c, ledger_id, n) -> bool:
    for e in range(n):
        status, got = c.read(ledger_id, e)
        if status != Status.OK or bytes(got[0]) != make_entry(ledger_id, e, _payload(ledger_id, e)):
            return False
    return True


def _triggergc(lb, i):
    o = lb.overrides(i)
    r = subprocess.run([sys.executable, "-m", "bookie", "shell", "triggergc", "--major",
                        "--set", f"journalDirectory={o['journalDirectory']}",
                        "--set", f"ledgerDirectories={o['ledgerDirectories']}",
                        "--set", f"metadataServiceUri={o['metadataServiceUri']}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_copies_sent_again_after_an_overreplicated_drop_survive_compaction_and_the_fence_stays(tmp_path):
    with LocalBookies(2, base_dir=str(tmp_path / "b"), conf=CONF) as lb:
        a, b = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            meta = LedgerMetadata(1, 1, 1, fragments=[(0, [b])])  # B was the ledger's bookie
            ledger, version = store.create_ledger(meta)
            filler, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [b])]))
            with RawBookieClient(a, timeout_s=30) as ca, RawBookieClient(b, timeout_s=30) as cb:
                _put(cb, ledger, range(N))
                assert cb.fence(ledger, KEY) == Status.OK  # and B fenced it (a recovery did)
                _put(ca, ledger, range(N), recovery=True)  # healed onto A: copies
                # closed on A alone: B holds a copy the metadata does not name any more
                meta.fragments = [(0, [a])]
                meta.state, meta.last_entry_id = LedgerState.CLOSED, N - 1
                version = store.write_ledger(ledger, meta, version)
                # the GC drops B's copies: closed, named nowhere, for the whole wait
                assert waiting.poll(lambda: cb.read(ledger, 0)[0] != Status.OK, 60), lb.log(1)[-3000:]
                # healed onto B again: the metadata names B, the copies come as recovery adds
                meta.fragments = [(0, [b])]
                store.write_ledger(ledger, meta, version)
                _put(cb, ledger, range(N), recovery=True)
                assert _reads_back(cb, ledger, N)
                # the log holding the copies rolls (the filler fills it), then a major compaction
                for e in range(200):
                    assert cb.add(filler, [make_entry(filler, e, b"f" * 2000)], KEY) == Status.OK
                store.remove_ledger(filler)  # its bytes are dead: the logs become candidates
                start = len(lb.log(1))
                _triggergc(lb, 1)
                assert waiting.poll(lambda: "compaction done" in lb.log(1)[start:], 60), lb.log(1)[start:]
                assert _reads_back(cb, ledger, N), "compaction took copies the metadata names"
        lb.stop(1)
        lb.start(1)
        with RawBookieClient(b, timeout_s=30) as cb:
            assert _reads_back(cb, ledger, N)
            # the fence B held before the drop still refuses the fenced-out writer
            assert cb.add(ledger, [make_entry(ledger, N, b"late")], KEY) == Status.FENCED
