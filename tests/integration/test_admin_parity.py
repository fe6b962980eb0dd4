"""BookKeeper's admin paths of issue 24.6 on real bookies (appliance/admin/parity.py): readiness,
disk files, sanity, cluster info, under-replicated ledgers, the auditor, the audit trigger and
the cluster's lostBookieRecoveryDelay, each 200 with JSON, bad input 400."""

from __future__ import annotations

import http.client
import json

import pytest

from bookie.appliance.shell.security import gentoken
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
import waiting

CONF = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "3600",
        "gcWaitTime": "600000", "zkTimeout": "4000"}


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    token_file = str(d / "admin.token")
    gentoken(token_file)  # sanity and the autorecovery changes are served only with a token
    with LocalBookies(2, base_dir=str(d / "e"), admin_http=True,
                      conf={**CONF, "httpServerAuthTokenFile": token_file}) as e:
        with open(token_file) as f:
            e.auth = {"Authorization": f"Bearer {f.read().strip()}"}
        with BookKeeper(e.metadata_uri) as bk:
            lh = bk.create_ledger(2, 2, 2, password=b"pw")
            lh.add_entry(b"on disk")
            lh.close()
        yield e
        for i in range(e.n):
            assert "Traceback" not in e.log(i) and "admin request failed" not in e.log(i)


@pytest.fixture
def ur(ens):
    store = open_metadata(ens.metadata_uri)
    try:
        yield UnderReplication(store)
    finally:
        store.close()


def call(ens, method: str, path: str, body: bytes | None = None, i: int = 0):
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[i], timeout=30)
    try:
        conn.request(method, path, body=body, headers=ens.auth)
        r = conn.getresponse()
        raw = r.read()
        assert r.getheader("Content-Type") == "application/json", (path, raw)
        return r.status, json.loads(raw)
    finally:
        conn.close()


def test_is_ready_says_ready_once_serving(ens):
    assert call(ens, "GET", "/api/v1/bookie/is_ready") == (200, {"ready": True})


def test_list_disk_file_names_journal_entry_log_and_index_files(ens):
    status, doc = call(ens, "GET", "/api/v1/bookie/list_disk_file")
    assert status == 200 and set(doc) == {"journal files", "entrylog files", "index files"}
    assert doc["journal files"].endswith(".txn") and ".log" in doc["entrylog files"]
    assert "index/data.mdb" in doc["index files"]
    status, doc = call(ens, "GET", "/api/v1/bookie/list_disk_file?file_type=journal")
    assert status == 200 and list(doc) == ["journal files"]
    status, doc = call(ens, "GET", "/api/v1/bookie/list_disk_file?file_type=disk")
    assert status == 400 and "file_type" in doc["error"]


def test_sanity_writes_and_reads_on_this_bookie(ens):
    status, doc = call(ens, "GET", "/api/v1/bookie/sanity", i=1)
    assert status == 200, doc
    assert doc["success"] is True and doc["bookie"] == ens.bookies[1] and doc["entries"] == 10


def test_cluster_info_counts_bookies_and_names_the_auditor(ens):
    waiting.wait_for(lambda: call(ens, "GET", "/api/v1/bookie/cluster_info")[1]["auditorElected"],
                     60, "an auditor elected")
    status, doc = call(ens, "GET", "/api/v1/bookie/cluster_info")
    assert status == 200 and doc["auditorId"] in ens.bookies
    assert {k: doc[k] for k in ("totalBookiesCount", "writableBookiesCount",
                                "readonlyBookiesCount", "unavailableBookiesCount",
                                "clusterUnderReplicated", "ledgerReplicationEnabled")} == {
        "totalBookiesCount": 2, "writableBookiesCount": 2, "readonlyBookiesCount": 0,
        "unavailableBookiesCount": 0, "clusterUnderReplicated": False,
        "ledgerReplicationEnabled": True}
    assert call(ens, "GET", "/api/v1/autorecovery/who_is_auditor") == \
        (200, {"Auditor": doc["auditorId"]})


def test_list_under_replicated_ledger_empty_then_marked(ens, ur):
    assert call(ens, "GET", "/api/v1/autorecovery/list_under_replicated_ledger") == (200, [])
    ur.set_enabled(False)  # the auditor leaves marks alone while autorecovery is off
    try:
        ur.mark(424242, ["127.0.0.1:1"])
        assert call(ens, "GET", "/api/v1/autorecovery/list_under_replicated_ledger") == \
            (200, [424242])
        assert call(ens, "GET", "/api/v1/autorecovery/list_under_replicated_ledger"
                                "?print_missing_replica=true") == (200, {"424242": ["127.0.0.1:1"]})
        status, doc = call(ens, "GET", "/api/v1/bookie/cluster_info")
        assert doc["clusterUnderReplicated"] is True and doc["ledgerReplicationEnabled"] is False
    finally:
        ur.unmark(424242)
        ur.set_enabled(True)


def test_trigger_audit_moves_the_trigger(ens, ur):
    before = ur.audit_trigger()
    status, doc = call(ens, "PUT", "/api/v1/autorecovery/trigger_audit")
    assert status == 200 and doc["triggered"] is True
    assert ur.audit_trigger() == doc["trigger"] > before
    assert call(ens, "GET", "/api/v1/autorecovery/trigger_audit")[0] == 405


def test_lost_bookie_recovery_delay_is_read_and_set_cluster_wide(ens, ur):
    path = "/api/v1/autorecovery/lost_bookie_recovery_delay"
    assert call(ens, "GET", path) == (200, {"delay_seconds": 3600, "source": "configuration"})
    assert call(ens, "PUT", path, b'{"delay_seconds": 7}') == \
        (200, {"delay_seconds": 7, "source": "metadata store"})
    assert ur.recovery_delay_s() == 7
    assert call(ens, "GET", path, i=1) == (200, {"delay_seconds": 7, "source": "metadata store"})
    for bad in (b'{"delay_seconds": -1}', b'{"delay_seconds": "7"}', b'{"delay": 7}', b"[]"):
        status, doc = call(ens, "PUT", path, bad)
        assert status == 400 and "delay_seconds" in doc["error"] or "JSON" in doc["error"], bad
    ur.set_recovery_delay_s(3600)


@pytest.mark.autorecovery_slow  # kills a bookie and waits for the heal (about 20 s)
def test_the_auditor_follows_the_delay_put_through_the_admin_api(tmp_path):
    """A bookie configured to wait an hour before healing a lost bookie heals at once after
    an operator PUT the delay 0 (the auditor reads the stored delay on every tick)."""
    token_file = str(tmp_path / "admin.token")
    gentoken(token_file)
    with LocalBookies(3, base_dir=str(tmp_path / "e"), admin_http=True,
                      conf={**CONF, "httpServerAuthTokenFile": token_file}) as lb, \
            BookKeeper(lb.metadata_uri) as bk:
        with open(token_file) as f:
            lb.auth = {"Authorization": f"Bearer {f.read().strip()}"}
        lh = bk.create_ledger(2, 2, 2, password=b"pw")
        for i in range(5):
            lh.add_entry(b"heal me %d" % i)
        lh.close()
        victim = lh.metadata.last_ensemble[0]
        asker = next(i for i, b in enumerate(lb.bookies) if b != victim)
        assert call(lb, "PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay",
                    b'{"delay_seconds": 0}', i=asker)[0] == 200
        lb.kill(lb.bookies.index(victim))

        def healed() -> bool:
            frags = bk.ledger_metadata(lh.ledger_id).fragments
            return all(victim not in ensemble for _, ensemble in frags)
        waiting.wait_for(healed, 120, f"ledger {lh.ledger_id} healed around {victim}")


PARITY_PATHS = [("GET", "/api/v1/bookie/is_ready", None),
                ("GET", "/api/v1/bookie/list_disk_file", None),
                ("GET", "/api/v1/bookie/cluster_info", None),
                ("GET", "/api/v1/autorecovery/list_under_replicated_ledger", None),
                ("GET", "/api/v1/autorecovery/who_is_auditor", None),
                ("PUT", "/api/v1/autorecovery/trigger_audit", None),
                ("GET", "/api/v1/autorecovery/lost_bookie_recovery_delay", None),
                ("PUT", "/api/v1/autorecovery/lost_bookie_recovery_delay",
                 b'{"delay_seconds": 5}')]


def test_the_new_paths_are_behind_the_token_like_the_others(tmp_path):
    token_file = str(tmp_path / "admin.token")
    gentoken(token_file)
    with open(token_file) as f:
        token = f.read().strip()
    with LocalBookies(1, base_dir=str(tmp_path / "e"), admin_http=True,
                      conf={"httpServerAuthTokenFile": token_file}) as lb:
        for method, path, body in PARITY_PATHS:
            for auth, want in ((None, 401), (f"Bearer {token}", 200)):
                conn = http.client.HTTPConnection("127.0.0.1", lb.http_ports[0], timeout=30)
                try:
                    conn.request(method, path, body=body,
                                 headers={"Authorization": auth} if auth else {})
                    r = conn.getresponse()
                    r.read()
                    assert r.status == want, (method, path, auth is not None, r.status)
                finally:
                    conn.close()
