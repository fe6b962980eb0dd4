"""The HTTP admin API of a real bookie: every path, with good input and bad (docs/admin.md)."""

from __future__ import annotations

import http.client
import json
import socket
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from bookie.workers.ports import free_port_pair
from bookie.workers.config import KEYS

KEY = b"admin-master-key"


@pytest.fixture(scope="module")
def ens():
    metrics_port = free_port_pair("127.0.0.1")
    conf = {"gcWaitTime": 600_000, "prometheusStatsHttpPort": metrics_port,
            "httpServerMaxConnections": 4, "httpServerIdleTimeoutMs": 1000}
    with LocalBookies(1, conf=conf, admin_http=True) as e:
        e.metrics_port = metrics_port
        yield e
        log = e.log(0)
        assert "Traceback" not in log and "admin request failed" not in log, log[-3000:]
        # no httpServerAuthTokenFile on loopback: served, with one warning line at start-up
        # (the authenticated API: tests/security/test_security_http.py)
        assert log.count("admin API without authentication") == 1, log[-3000:]


def call(ens, method: str, path: str, body: bytes | None = None, port: int | None = None,
         headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port or ens.http_ports[0], timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def call_json(ens, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    status, headers, raw = call(ens, method, path, body)
    assert headers["Content-Type"] == "application/json", (path, headers)
    return status, json.loads(raw)


def scrape(ens, port=None) -> dict:
    status, _, raw = call(ens, "GET", "/metrics", port=port)
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(raw.decode())}


def sample(families: dict, family: str, sample_name: str, **labels) -> float:
    for s in families[family].samples:
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError(f"{sample_name}{labels}")


def wait(pred, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


# ---- good input ----------------------------------------------------------------------------------

def test_heartbeat_answers_ok(ens):
    assert call_json(ens, "GET", "/heartbeat") == (200, {"status": "OK"})


def test_server_config_lists_every_key_with_its_value(ens):
    status, conf = call_json(ens, "GET", "/api/v1/config/server_config")
    assert status == 200 and set(conf) == {k.name for k in KEYS}
    assert conf["httpServerEnabled"] is True and conf["httpServerPort"] == ens.http_ports[0]
    assert conf["bookiePort"] == ens.ports[0] and conf["gcWaitTime"] == 600_000


def test_bookie_info_gives_free_and_total_space(ens):
    status, info = call_json(ens, "GET", "/api/v1/bookie/info")
    assert status == 200 and set(info) == {"freeSpace", "totalSpace"}
    assert 0 < info["freeSpace"] <= info["totalSpace"]


def test_readonly_is_set_and_lifted_through_the_api(ens):
    lid = 7_000_001
    create_ledgers(ens.metadata_uri, [lid], KEY)  # a bookie stores only ids its store knows
    assert call_json(ens, "GET", "/api/v1/bookie/state/readonly") == (200, {"readOnly": False})
    status, got = call_json(ens, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}')
    assert status == 200 and got["readOnly"] is True and got["forcedReadOnly"] is True
    status, state = call_json(ens, "GET", "/api/v1/bookie/state")
    assert status == 200 and state["readOnly"] is True and state["running"] is True
    assert state["availableForHighPriorityWrites"] is False
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(lid, [make_entry(lid, 0, b"x")], KEY) == Status.READ_ONLY
    assert wait(lambda: ens.bookies[0] in call_json(
        ens, "GET", "/api/v1/bookie/list_bookies?type=ro")[1])
    assert sample(scrape(ens), "bookie_readonly", "bookie_readonly") == 1
    status, got = call_json(ens, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": false}')
    assert status == 200 and got["readOnly"] is False
    assert call_json(ens, "GET", "/api/v1/bookie/state/readonly") == (200, {"readOnly": False})
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(lid, [make_entry(lid, 0, b"x")], KEY) == Status.OK
    assert wait(lambda: ens.bookies[0] in call_json(
        ens, "GET", "/api/v1/bookie/list_bookies?type=rw")[1])


def test_put_gc_runs_a_pass_now_and_drops_a_deleted_ledger(ens):
    """gcWaitTime is 10 minutes here: only the request can make this pass happen."""
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        doomed, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        assert c.add(doomed, [make_entry(doomed, 0, b"doomed")], KEY) == Status.OK
        # A live ledger stays in the store: GC refuses to act on a listing with no ledger at all.
        keeper, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        assert c.add(keeper, [make_entry(keeper, 0, b"kept")], KEY) == Status.OK
        store.remove_ledger(doomed)
        runs_before = sample(scrape(ens), "bookie_gc_runs", "bookie_gc_runs_total")
        assert c.read(doomed, 0)[0] == Status.OK  # no pass has run since the removal
        assert call_json(ens, "PUT", "/api/v1/bookie/gc") == (
            200, {"gcRequested": True, "forceMajor": False, "forceMinor": False})
        assert wait(lambda: c.read(doomed, 0)[0] == Status.NO_LEDGER)
        assert c.read(keeper, 0)[0] == Status.OK
    assert wait(lambda: sample(scrape(ens), "bookie_gc_runs", "bookie_gc_runs_total") > runs_before)
    assert call_json(ens, "PUT", "/api/v1/bookie/gc", b"{}")[0] == 200
    assert call_json(ens, "PUT", "/api/v1/bookie/gc", b'{"forceMajor": true}') == (
        200, {"gcRequested": True, "forceMajor": True, "forceMinor": False})
    assert call_json(ens, "PUT", "/api/v1/bookie/gc", b'{"forceMinor": "yes"}')[0] == 400


def test_list_bookies_names_the_registered_bookies(ens):
    status, got = call_json(ens, "GET", "/api/v1/bookie/list_bookies")
    assert status == 200 and got == {ens.bookies[0]: None}
    status, got = call_json(ens, "GET", "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true")
    assert status == 200 and got == {ens.bookies[0]: "127.0.0.1"}


def test_ledger_list_and_metadata_come_from_the_store(ens):
    with open_metadata(ens.metadata_uri) as store:
        ids = [store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))[0]
               for _ in range(3)]
    status, listed = call_json(ens, "GET", "/api/v1/ledger/list")
    assert status == 200 and {str(i) for i in ids} <= set(listed)
    assert all(v is None for v in listed.values())
    status, listed = call_json(ens, "GET", "/api/v1/ledger/list?print_metadata=true&page=1")
    assert status == 200 and listed[str(ids[0])]["ensemble_size"] == 1
    status, meta = call_json(ens, "GET", f"/api/v1/ledger/metadata?ledger_id={ids[1]}")
    assert status == 200 and list(meta) == [str(ids[1])]
    assert meta[str(ids[1])]["fragments"] == [[0, [ens.bookies[0]]]]
    assert meta[str(ids[1])]["state"] == "OPEN" and meta[str(ids[1])]["version"] >= 0


def test_both_metrics_endpoints_serve_the_same_registry(ens):
    # Families only ever appear (a label set's first sample): scraped in turn, each endpoint
    # shows at least what the other showed just before.
    admin = scrape(ens)
    plain = scrape(ens, port=ens.metrics_port)
    again = scrape(ens)
    assert set(admin) <= set(plain) <= set(again) and "bookie_add_entry_seconds" in admin
    # prometheusStatsHttpPort serves /metrics only
    assert call(ens, "GET", "/heartbeat", port=ens.metrics_port)[0] == 404


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("body, why", [
    (b"{not json", "not JSON"),
    (b"", "expected a JSON object"),
    (b"[true]", "expected a JSON object"),
    (b'{"readOnly": "yes"}', "readOnly"),
    (b'{"readonly": true}', "readOnly"),
])
def test_readonly_refuses_bad_bodies_with_400(ens, body, why):
    status, got = call_json(ens, "PUT", "/api/v1/bookie/state/readonly", body)
    assert status == 400 and why in got["error"], got
    assert call_json(ens, "GET", "/api/v1/bookie/state/readonly") == (200, {"readOnly": False})


@pytest.mark.parametrize("query, status", [
    ("", 400), ("ledger_id=", 400), ("ledger_id=abc", 400), ("ledger_id=-1", 400),
    ("ledger_id=99999999999999999999999", 400), ("ledger_id=1&ledger_id=2", 400),
    ("ledger_id=987654321", 404),
])
def test_ledger_metadata_refuses_missing_invalid_and_unknown_ids(ens, query, status):
    got_status, got = call_json(ens, "GET", f"/api/v1/ledger/metadata?{query}")
    assert got_status == status and got["error"], got


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/api/v1/no/such/path", 404),
    ("GET", "/", 404),
    ("POST", "/heartbeat", 405),
    ("DELETE", "/api/v1/bookie/gc", 405),
    ("POST", "/api/v1/bookie/gc", 405),  # GET is BookKeeper's GC status (admin/ops.py)
    ("PUT", "/api/v1/bookie/info", 405),
    ("GET", "/api/v1/bookie/list_bookies?type=both", 400),
    ("GET", "/api/v1/ledger/list?print_metadata=maybe", 400),
    ("GET", "/api/v1/ledger/list?page=0", 400),
    ("PUT", "/api/v1/bookie/gc", 400),  # with a body that is not JSON (below)
])
def test_unknown_paths_wrong_methods_and_bad_parameters_are_4xx_json(ens, method, path, status):
    body = b"{oops" if path == "/api/v1/bookie/gc" and method == "PUT" else None
    got_status, headers, raw = call(ens, method, path, body)
    assert got_status == status and json.loads(raw)["error"]
    if status == 405:
        assert headers["Allow"]


def test_an_oversized_body_is_413(ens):
    status, got = call_json(ens, "PUT", "/api/v1/bookie/state/readonly", b" " * (65 * 1024))
    assert status == 413 and "body" in got["error"]


@pytest.mark.parametrize("payload, status", [
    (b"\x00\x01GARBAGE nonsense\r\n\r\n", 400),
    (b"GARBAGE / NOTHTTP\r\n\r\n", 400),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /heartbeat HTTP/1.1\r\n" + b"X-Filler: y\r\n" * 150 + b"\r\n", 431),
    (b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nContent-Length: 50\r\n\r\n{}", 400),
    (b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nContent-Length: x\r\n\r\n{}", 400),
    (b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
])
def test_garbage_on_the_socket_gets_a_json_4xx_and_the_server_carries_on(ens, payload, status):
    with socket.create_connection(("127.0.0.1", ens.http_ports[0]), timeout=5) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        raw = b""
        while chunk := s.recv(4096):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and f" {status} ".encode() in head.split(b"\r\n")[0], raw[:200]
    assert json.loads(body)["error"]
    assert call_json(ens, "GET", "/heartbeat") == (200, {"status": "OK"})


def test_half_open_connections_are_capped_and_time_out(ens):
    """httpServerMaxConnections=4, httpServerIdleTimeoutMs=1000 in this module's bookie.  Four
    half-open connections hold every place; a whole request takes the place of the oldest of
    them (appliance/admin/http_guard.py) instead of being refused, and the rest time out."""
    idle = [socket.create_connection(("127.0.0.1", ens.http_ports[0]), timeout=5) for _ in range(4)]
    try:
        time.sleep(0.3)  # let the server take them all
        status, _, raw = call(ens, "GET", "/heartbeat")
        assert status == 200, raw
        assert idle[0].recv(4096) == b""  # evicted, at once
        for s in idle[1:]:  # the server closes each idle connection after its 1 s timeout
            s.settimeout(60)  # a close, not the test's patience, ends the wait
            assert s.recv(4096) == b""
    finally:
        for s in idle:
            s.close()
    assert wait(lambda: call(ens, "GET", "/heartbeat")[0] == 200, 5.0)


def test_a_bookie_without_a_metadata_store_says_so_with_409(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), admin_http=True,
                      conf={"metadataServiceUri": ""}) as e:
        for method, path in (("GET", "/api/v1/ledger/list"), ("GET", "/api/v1/bookie/list_bookies"),
                             ("GET", "/api/v1/ledger/metadata?ledger_id=1"), ("PUT", "/api/v1/bookie/gc")):
            status, got = call_json(e, method, path)
            assert status == 409 and "metadata store" in got["error"], (path, got)
        assert call_json(e, "GET", "/heartbeat") == (200, {"status": "OK"})
