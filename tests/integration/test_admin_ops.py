"""The operator's admin paths (appliance/admin/ops.py) on a real bookie over real HTTP: GC
status and details, compaction suspended and resumed (and a requested pass then skips it),
LastLogMark, the bookies' info, a ledger read from the bookie's storage and deleted, the
autorecovery switch and decommission marks, and the two changes that have no meaning while the
bookie runs (expand_storage, PUT server_config) refused in one line."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from bookie.appliance.admin import ROUTES
from bookie.appliance.admin.ops import MAX_READ_BYTES
from bookie.appliance.shell.security import gentoken
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies

PASSWORD = b"ops"


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    token_file = str(d / "admin.token")
    gentoken(token_file)  # most of these paths change state: served only with a token
    conf = {"gcWaitTime": 600_000, "httpServerAuthTokenFile": token_file}
    with LocalBookies(1, base_dir=str(d / "e"), conf=conf, admin_http=True) as e:
        with open(token_file) as f:
            e.auth = {"Authorization": f"Bearer {f.read().strip()}"}
        with BookKeeper(e.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
            for i in range(10):
                lh.add_entry(b"op entry %d" % i)
            lh.close()
        e.ledger_id = lh.ledger_id
        yield e
        assert "Traceback" not in e.log(0) and "admin request failed" not in e.log(0)


def call(ens, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=30)
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                     headers=ens.auth)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_gc_status_details_and_suspended_compaction(ens):
    assert call(ens, "GET", "/api/v1/bookie/gc") == (200, {"is_in_force_gc": False})
    status, doc = call(ens, "GET", "/api/v1/bookie/gc_details")
    assert status == 200 and "bookie_gc_runs_total" in doc["figures"]
    assert doc["isMajorGcSuspended"] is False
    status, doc = call(ens, "PUT", "/api/v1/bookie/gc/suspend_compaction",
                       {"suspendMajor": True})
    assert doc == {"isMajorGcSuspended": True, "isMinorGcSuspended": False}
    assert call(ens, "PUT", "/api/v1/bookie/gc", {"forceMajor": True})[0] == 200
    deadline = time.monotonic() + 60
    while "compaction suspended; pass skipped" not in ens.log(0):
        assert time.monotonic() < deadline, ens.log(0)[-2000:]
        time.sleep(0.1)
    status, doc = call(ens, "PUT", "/api/v1/bookie/gc/resume_compaction", {"resumeMajor": True})
    assert doc == {"isMajorGcSuspended": False, "isMinorGcSuspended": False}
    assert call(ens, "PUT", "/api/v1/bookie/gc/suspend_compaction", {"suspendMajor": 1})[0] == 400


def test_last_log_mark_and_bookie_info(ens):
    status, doc = call(ens, "GET", "/api/v1/bookie/last_log_mark")
    assert status == 200 and list(doc) == [ens.overrides(0)["ledgerDirectories"]]
    status, doc = call(ens, "GET", "/api/v1/bookie/list_bookie_info")
    assert status == 200 and doc["writable"] == ens.bookies and doc["bookies"] == 1
    assert doc["this_bookie"]["freeSpace"] > 0


def test_ledger_read_then_delete(ens):
    status, doc = call(ens, "GET", f"/api/v1/ledger/read?ledger_id={ens.ledger_id}"
                                   f"&start_entry_id=2&end_entry_id=4")
    assert (status, doc) == (200, {"2": "op entry 2", "3": "op entry 3", "4": "op entry 4"})
    assert call(ens, "GET", "/api/v1/ledger/read?ledger_id=999999")[0] == 404
    status, doc = call(ens, "DELETE", f"/api/v1/ledger/delete?ledger_id={ens.ledger_id}")
    assert (status, doc) == (200, {"deleted": ens.ledger_id})
    assert call(ens, "DELETE", f"/api/v1/ledger/delete?ledger_id={ens.ledger_id}")[0] == 404


def test_ledger_read_builds_at_most_its_byte_bound_in_the_supervisor(ens):
    assert "/api/v1/ledger/read" in ROUTES
    size = 1 << 20
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(MAX_READ_BYTES // size + 2):
            lh.add_entry(b"%d" % i * size)
        lh.close()
    status, doc = call(ens, "GET", f"/api/v1/ledger/read?ledger_id={lh.ledger_id}")
    assert status == 200 and list(doc) == [str(i) for i in range(MAX_READ_BYTES // size)]
    status, doc = call(ens, "GET", f"/api/v1/ledger/read?ledger_id={lh.ledger_id}"
                                   f"&start_entry_id={MAX_READ_BYTES // size}")
    assert list(doc) == [str(MAX_READ_BYTES // size), str(MAX_READ_BYTES // size + 1)]


def test_autorecovery_switch_and_decommission(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        lh.add_entry(b"x")
        lh.close()
    assert call(ens, "PUT", "/api/v1/autorecovery/status?enabled=false") == (200, {"enabled": False})
    assert call(ens, "GET", "/api/v1/autorecovery/status") == (200, {"enabled": False})
    status, doc = call(ens, "PUT", "/api/v1/autorecovery/decommission",
                       {"bookie_src": ens.bookies[0]})
    assert status == 200 and doc["marked_ledgers"] >= 1 and doc["autorecovery_enabled"] is False
    with open_metadata(ens.metadata_uri) as store:
        assert lh.ledger_id in UnderReplication(store).marks()
    assert call(ens, "PUT", "/api/v1/autorecovery/status", {"enabled": True}) == \
        (200, {"enabled": True})
    assert call(ens, "PUT", "/api/v1/autorecovery/decommission", {"bookie_src": 7})[0] == 400
    status, doc = call(ens, "PUT", "/api/v1/autorecovery/decommission",
                       {"bookie_src": "127.0.0.9:3181"})  # a typo is not a bookie holding nothing
    assert status == 404 and "no bookie 127.0.0.9:3181" in doc["error"], doc


def test_changes_that_need_a_stopped_bookie_are_refused_in_one_line(ens):
    status, doc = call(ens, "PUT", "/api/v1/bookie/expand_storage")
    assert status == 409 and "expandstorage" in doc["error"]
    status, doc = call(ens, "PUT", "/api/v1/config/server_config", {"gcWaitTime": 1})
    assert status == 409 and "restart" in doc["error"]
    assert call(ens, "GET", "/api/v1/config/server_config")[0] == 200
