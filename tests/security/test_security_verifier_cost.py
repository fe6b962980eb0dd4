"""A client does not choose what a key check costs a bookie (issue 33, item 4).

Against a real bookie through raw ZeroMQ: a client writes its own ledger's record with a
verifier asking for 1 GiB of scrypt (log2 N = 20, r = 8: allowed before, and evaluated for
every key tried, four such ADDs blocked the bookie's owner resolver for seconds and one could
get the add worker killed at ``workerMemoryLimitMB``).  Now the bookie refuses every ADD to it
at once (UNAUTHORIZED) without evaluating anything, its add worker is never restarted, and
another writer's first add meanwhile is served at once.
"""

from __future__ import annotations

import time

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import make_key_check
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"w" * 20


def test_a_costly_verifier_is_refused_at_once_and_delays_no_one(tmp_path):
    conf = {"flushInterval": 50, "workerMemoryLimitMB": 512}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        costly = bytes((2, 20, 8, 1)) + b"s" * 16 + b"h" * 32
        with open_metadata(ens.metadata_uri) as store:
            bad, _ = store.create_ledger(LedgerMetadata(1, 1, 1, key_check=costly,
                                                        fragments=[(0, ens.bookies)]))
            good, _ = store.create_ledger(LedgerMetadata(1, 1, 1, key_check=make_key_check(KEY),
                                                         fragments=[(0, ens.bookies)]))
        with RawBookieClient(ens.bookies[0]) as raw:
            start = time.monotonic()
            for i in range(4):
                key = b"made-up-key-%08d" % i
                assert raw.add(bad, [make_entry(bad, 0, b"x")], key) == Status.UNAUTHORIZED
            assert raw.add(good, [make_entry(good, 0, b"mine")], KEY) == Status.OK
            took_s = time.monotonic() - start
        assert took_s < 8.0, took_s  # before: seconds per made-up key, or a killed worker
        log = ens.log(0)
        assert "restart" not in log and "memory" not in log.lower(), log[-2000:]
