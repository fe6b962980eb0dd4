"""Embedded LMDB store: leases of killed and stopped processes, kill -9 mid-write, fork, watches."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time

import pytest

from bookie.metadata import LedgerMetadata, open_metadata

LEASE_MS = 500
BOOKIE = "127.0.0.1:3181"

_REGISTER = """
import sys, time
from bookie.metadata import open_metadata
store = open_metadata(sys.argv[1], lease_ms=int(sys.argv[3]))
store.register_bookie(sys.argv[2])
print("ready", flush=True)
time.sleep(60)
"""

_WRITE_FOREVER = """
import sys
from bookie.metadata import LedgerMetadata, open_metadata
store = open_metadata(sys.argv[1])
print("ready", flush=True)
n = 0
while True:
    ledger_id, version = store.create_ledger(LedgerMetadata(1, 1, 1, custom={"n": str(n)}))
    meta, version = store.read_ledger(ledger_id)
    meta.custom["n"] = str(n + 1)
    store.write_ledger(ledger_id, meta, version)
    store.create(f"/underreplication/ledgers/{ledger_id}", b"x" * 100, ephemeral=n % 2 == 0)
    n += 1
"""


def spawn(script: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE)
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    if not ready or proc.stdout.readline().strip() != b"ready":
        proc.kill()
        raise AssertionError("helper process did not start")
    return proc


def wait_for(predicate, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)
    return time.monotonic() - started


@pytest.fixture
def uri(tmp_path):
    """An initialised, empty embedded store."""
    uri = f"lmdb://{tmp_path}/md"
    open_metadata(uri, create=True).close()
    return uri


def test_bookie_killed_with_sigkill_drops_out_within_the_lease(uri):
    with open_metadata(uri, watch_poll_s=0.05) as observer:
        proc = spawn(_REGISTER, uri, BOOKIE, str(LEASE_MS))
        try:
            assert observer.list_bookies() == [BOOKIE]
            seen = []
            observer.watch_bookies(lambda writable, readonly: seen.append(writable))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            gone_after_s = wait_for(lambda: observer.list_bookies() == [], 5, "lease expiry")
            assert gone_after_s <= LEASE_MS / 1000 + 0.2
            wait_for(lambda: seen == [[]], 1, "the watch to report it")
        finally:
            proc.kill()
            proc.wait(10)
        # Nobody cleaned up, yet a new bookie may take the identity at once.
        observer.register_bookie(BOOKIE)
        assert observer.list_bookies() == [BOOKIE]


def test_stopped_bookie_drops_out_and_registers_again_when_it_resumes(uri):
    with open_metadata(uri) as observer:
        proc = spawn(_REGISTER, uri, BOOKIE, str(LEASE_MS))
        try:
            proc.send_signal(signal.SIGSTOP)
            wait_for(lambda: observer.list_bookies() == [], 5, "lease expiry")
            proc.send_signal(signal.SIGCONT)
            wait_for(lambda: observer.list_bookies() == [BOOKIE], 5, "re-registration")
        finally:
            proc.kill()
            proc.wait(10)


def test_kill_9_mid_write_leaves_the_store_consistent(uri):
    rng = random.Random(7)
    for _ in range(3):
        proc = spawn(_WRITE_FOREVER, uri)
        time.sleep(rng.uniform(0.1, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    with open_metadata(uri, timeout_s=5.0) as store:
        ids = list(store.list_ledgers())
        assert len(ids) > 0
        for ledger_id in ids:
            meta, version = store.read_ledger(ledger_id)  # every record decodes
            assert int(meta.custom["n"]) >= 0 and version in (0, 1)
        new_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))  # write lock was recovered
        assert new_id > max(ids)
        markers = store.children("/underreplication/ledgers")
        assert all(int(m) in ids for m in markers)


def test_a_forked_child_can_use_the_store_and_the_parent_keeps_working(uri):
    with open_metadata(uri, watch_poll_s=0.01) as store:
        store.register_bookie(BOOKIE)
        store.watch_children("/x", lambda kids: None)  # a polling thread reads all the time
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    child_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
                    code = 0 if store.read_ledger(ledger_id)[1] == 0 and child_id > ledger_id else 1
                    store.close()
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            assert store.read_ledger(ledger_id)[1] == 0
        assert store.list_bookies() == [BOOKIE]  # the children did not take our lease
        assert len(list(store.list_ledgers())) == 6


def test_watch_is_delivered_within_the_poll_interval(uri):
    with open_metadata(uri) as store:  # default watch_poll_s = 0.1
        ledger_id, version = store.create_ledger(LedgerMetadata(1, 1, 1))
        delivered = []
        store.watch_ledger(ledger_id, lambda meta, v: delivered.append(time.monotonic()))
        written_at = time.monotonic()
        store.write_ledger(ledger_id, LedgerMetadata(1, 1, 1, state="CLOSED"), version)
        wait_for(lambda: delivered, 2, "the watch")
        assert delivered[0] - written_at < 0.1 + 0.15


def test_unusable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    from bookie.metadata import MetadataError
    with pytest.raises(MetadataError, match="metadata"):
        open_metadata(f"lmdb://{blocker}/md", create=True)


def test_another_programs_lmdb_environment_is_refused_and_left_as_it_was(tmp_path):
    import lmdb
    from bookie.metadata import MetadataError, NoSuchStoreError

    other = tmp_path / "index"  # e.g. a bookie's entry index, named by mistake
    env = lmdb.open(str(other), map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"key", b"value")
    env.close()
    before = (other / "data.mdb").read_bytes()
    with pytest.raises(NoSuchStoreError, match="not a metadata store"):
        open_metadata(f"lmdb://{other}")
    with pytest.raises(MetadataError, match="holds no metadata store"):
        open_metadata(f"lmdb://{other}", create=True)  # not even metaformat writes into it
    assert (other / "data.mdb").read_bytes() == before
