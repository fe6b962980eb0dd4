"""The admin API without a token serves reads and exactly two changes (issue 33, item 1).

Against a real bookie serving the admin API on loopback without ``httpServerAuthTokenFile``:
every route of ``admin.ROUTES`` is tried.  The read-only GETs are served; PUT readonly and PUT
gc are served; everything else (deleting a ledger, decommission, the autorecovery switch, the
audit trigger, compaction suspension, ``GET /api/v1/ledger/read`` that hands out entries, and
``GET /api/v1/bookie/sanity`` that writes a ledger) is 403 naming ``httpServerAuthTokenFile``
and changes nothing.  The start warning lists exactly the two changes served.  ``Host:
[::1]anything`` is not taken for ``::1``.
"""

from __future__ import annotations

import http.client
import json

import pytest

from bookie.appliance.admin import ROUTES
from bookie.appliance.admin.auth import TOKENLESS_WRITES
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies

# what each route needs to be served (parameters, a body) once it is let through
ARGS = {"/api/v1/ledger/read": "?ledger_id={lid}", "/api/v1/ledger/metadata": "?ledger_id={lid}",
        "/api/v1/ledger/delete": "?ledger_id={lid}", "/api/v1/autorecovery/status": "?enabled=false"}
BODIES = {"/api/v1/bookie/state/readonly": b'{"readOnly": false}',
          "/api/v1/autorecovery/decommission": b'{"bookie_src": "127.0.0.1:1"}',
          "/api/v1/autorecovery/lost_bookie_recovery_delay": b'{"delay_seconds": 5}',
          "/api/v1/bookie/gc/suspend_compaction": b'{"suspendMajor": true}'}
TOKEN_ONLY_GETS = {"/api/v1/ledger/read", "/api/v1/bookie/sanity"}


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    conf = {"gcWaitTime": 600_000}
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("tokenless")), conf=conf,
                      admin_http=True) as e:
        with BookKeeper(e.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"pw")
            lh.add_entry(b"secret entry")
            lh.close()
        e.ledger_id = lh.ledger_id
        yield e
        assert "Traceback" not in e.log(0), e.log(0)[-3000:]


def call(port: int, method: str, path: str, body: bytes | None = None,
         host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def every_route():
    return [(method, path) for path, methods in sorted(ROUTES.items()) for method in sorted(methods)]


def test_without_a_token_only_reads_and_the_two_named_changes_are_served(ens):
    port = ens.http_ports[0]
    served, refused = set(), set()
    for method, path in every_route():
        if path == "/api/v1/ledger/delete":
            continue  # last, below: it would take the ledger the others read
        status, raw = call(port, method, path + ARGS.get(path, "").format(lid=ens.ledger_id),
                           BODIES.get(path))
        if status == 403:
            assert "httpServerAuthTokenFile" in json.loads(raw)["error"], (method, path, raw)
            refused.add((method, path))
        else:
            served.add((method, path))
    status, raw = call(port, "DELETE", f"/api/v1/ledger/delete?ledger_id={ens.ledger_id}")
    assert status == 403 and b"httpServerAuthTokenFile" in raw, raw
    refused.add(("DELETE", "/api/v1/ledger/delete"))

    writes_served = {(m, p) for m, p in served if m != "GET"}
    assert writes_served == set(TOKENLESS_WRITES) == {
        ("PUT", "/api/v1/bookie/state/readonly"), ("PUT", "/api/v1/bookie/gc")}
    assert {p for m, p in refused if m == "GET"} == TOKEN_ONLY_GETS
    assert {(m, p) for m, p in refused if m != "GET"} == {
        (m, p) for m, p in every_route() if m != "GET"} - writes_served

    # and nothing those refusals would have changed changed
    with open_metadata(ens.metadata_uri) as store:
        store.read_ledger(ens.ledger_id)  # not deleted
        assert UnderReplication(store).enabled()  # the switch not turned off
        assert UnderReplication(store).marks() == {}  # nothing decommissioned
        assert UnderReplication(store).recovery_delay_s() != 5  # the delay not set
        assert sorted(store.list_ledgers()) == [ens.ledger_id]  # sanity wrote no ledger
    status, raw = call(port, "GET", "/api/v1/bookie/gc/suspend_compaction")
    assert json.loads(raw) == {"isMajorGcSuspended": False, "isMinorGcSuspended": False}
    assert "admin request refused: needs a token" in ens.log(0)


def test_the_start_warning_names_exactly_the_changes_served(ens):
    lines = [line for line in ens.log(0).splitlines() if "admin API without authentication" in line]
    assert len(lines) == 1, lines
    line = lines[0]
    for method, path in TOKENLESS_WRITES:
        assert f"{method} {path}" in line
    assert "/api/v1/ledger/delete" not in line and "every other change" in line


@pytest.mark.parametrize("host", ["[::1]anything", "[::1]evil.example", "[::1]:80x", "[::1"])
def test_a_host_that_only_starts_like_loopback_is_refused(ens, host):
    status, raw = call(ens.http_ports[0], "PUT", "/api/v1/bookie/state/readonly",
                       b'{"readOnly": true}', host=host)
    assert status == 403 and b"httpServerAllowedHosts" in raw, raw
    status, raw = call(ens.http_ports[0], "GET", "/api/v1/bookie/state/readonly", host="[::1]:80")
    assert status == 200 and json.loads(raw) == {"readOnly": False}
