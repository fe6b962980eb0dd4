"""The HTTP admin API serves only who holds its token (issue 15; docs/admin.md "Authentication").

Against a real bookie with ``httpServerAuthTokenFile``: every route but GET /heartbeat is 401
without the token or with a wrong one, and nothing it would change changes; with the token the
API works; the Prometheus port stays open.  Bad token files and an unauthenticated API beyond
loopback are refused at start in one line, exit status 2; ``bookie shell gentoken`` makes a
private token file and never replaces one.
"""

from __future__ import annotations

import http.client
import json
import os
import stat
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from bookie.appliance.admin.auth import LOG_INTERVAL_S, MISSING, BearerAuth
from bookie.appliance.shell.security import gentoken
from bookie.appliance.startchecks import StartRefused, check_admin_security, load_admin_token
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookieError, LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from bookie.workers.ports import free_port_pair
from bookie.workers.config import BookieConfig

KEY = b"http-auth-master-key"
REFUSED_LINE = "admin request refused: not authenticated"

# (method, path, body): what changes state, what lists or reads metadata, and the rest
ROUTES = [
    ("PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}'),
    ("PUT", "/api/v1/bookie/gc", b'{"forceMajor": true}'),
    ("GET", "/api/v1/ledger/list?print_metadata=true", None),
    ("GET", "/api/v1/ledger/metadata?ledger_id=0", None),
    ("GET", "/api/v1/bookie/list_bookies?type=rw", None),
    ("GET", "/api/v1/config/server_config", None),
    ("GET", "/api/v1/bookie/state", None),
    ("GET", "/api/v1/bookie/state/readonly", None),
    ("GET", "/api/v1/bookie/info", None),
    ("GET", "/metrics", None),
    ("GET", "/api/v1/no/such/path", None),  # the route table is not shown to strangers either
    ("POST", "/heartbeat", None),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("httpauth")
    token_file = str(d / "admin.token")
    gentoken(token_file)
    with open(token_file, "rb") as f:
        token = f.read().strip().decode()
    metrics_port = free_port_pair("127.0.0.1")
    conf = {"httpServerAuthTokenFile": token_file, "prometheusStatsHttpPort": metrics_port,
            "gcWaitTime": 600_000, "flushInterval": 50}
    with LocalBookies(1, base_dir=str(d / "e"), conf=conf, admin_http=True) as e:
        e.token = token
        e.metrics_port = metrics_port
        with open_metadata(e.metadata_uri) as store:
            e.ledger, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [e.bookies[0]])]))
        yield e
        log = e.log(0)
        assert "Traceback" not in log and "admin request failed" not in log, log[-3000:]
        assert "admin API without authentication" not in log


def call(ens, method: str, path: str, body: bytes | None = None, auth: str | None = None,
         port: int | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port or ens.http_ports[0], timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Authorization": auth} if auth else {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def bearer(ens) -> str:
    return f"Bearer {ens.token}"


def refused_total(ens, port=None) -> float:
    status, _, raw = call(ens, "GET", "/metrics", auth=None if port else bearer(ens), port=port)
    assert status == 200
    for family in text_string_to_metric_families(raw.decode()):
        for s in family.samples:
            if s.name == "bookie_admin_http_unauthorized_total":
                return s.value
    raise AssertionError("bookie_admin_http_unauthorized_total not exposed")


def bad_credentials(ens) -> list[str | None]:
    token = ens.token
    return [None, "Bearer", f"Bearer {token[:-1]}", f"Bearer {token}x", f"Bearer {token[::-1]}",
            f"Basic {token}", token, "Bearer " + "A" * len(token)]


def gc_passes_asked(ens) -> int:
    """Passes the GC worker ran on request (its "gc ... requested=true" line)."""
    return ens.log(0).count("requested=true")


def test_without_the_token_every_route_but_heartbeat_is_401_and_nothing_changes(secured):
    before = refused_total(secured)
    asked = gc_passes_asked(secured)
    refusals = 0
    for method, path, body in ROUTES:
        for auth in bad_credentials(secured):
            status, headers, raw = call(secured, method, path, body, auth=auth)
            assert status == 401, (method, path, auth, status, raw[:200])
            assert headers["WWW-Authenticate"].startswith("Bearer ")
            assert headers["Content-Type"] == "application/json"
            error = json.loads(raw)["error"]
            assert error and "\n" not in error and secured.token not in error
            refusals += 1
    # a body is dropped unparsed, and the 401 still reaches the client whole
    status, _, raw = call(secured, "PUT", "/api/v1/bookie/state/readonly", b" " * 60_000)
    assert status == 401 and "authentication required" in json.loads(raw)["error"]
    refusals += 1
    # the bookie is neither read-only nor asked for a GC pass; its adds go on
    status, _, raw = call(secured, "GET", "/api/v1/bookie/state", auth=bearer(secured))
    assert status == 200 and json.loads(raw)["readOnly"] is False
    time.sleep(0.5)  # a GC request is taken within 100 ms
    assert gc_passes_asked(secured) == asked
    lid = 8_100_001
    create_ledgers(secured.metadata_uri, [lid], KEY)  # a bookie stores only ids its store knows
    with RawBookieClient(secured.bookies[0]) as c:
        assert c.add(lid, [make_entry(lid, 0, b"still writable")], KEY) == Status.OK
    assert refused_total(secured) - before == refusals


def test_with_the_token_the_api_works(secured):
    auth = bearer(secured)
    status, _, raw = call(secured, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}', auth)
    assert status == 200 and json.loads(raw)["readOnly"] is True
    lid = 8_100_002
    create_ledgers(secured.metadata_uri, [lid], KEY)
    with RawBookieClient(secured.bookies[0]) as c:
        assert c.add(lid, [make_entry(lid, 0, b"x")], KEY) == Status.READ_ONLY
    status, _, raw = call(secured, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": false}',
                          "bearer " + secured.token)  # the scheme in any case (RFC 7235)
    assert status == 200 and json.loads(raw)["readOnly"] is False
    assert call(secured, "PUT", "/api/v1/bookie/gc", b"{}", auth)[0] == 200
    status, _, raw = call(secured, "GET", "/api/v1/ledger/list", auth=auth)
    assert status == 200 and str(secured.ledger) in json.loads(raw)
    path = f"/api/v1/ledger/metadata?ledger_id={secured.ledger}"
    assert call(secured, "GET", path, auth=auth)[0] == 200
    assert call(secured, "GET", "/api/v1/no/such/path", auth=auth)[0] == 404


def test_heartbeat_and_the_prometheus_port_need_no_token(secured):
    status, _, raw = call(secured, "GET", "/heartbeat")
    assert status == 200 and json.loads(raw) == {"status": "OK"}
    assert call(secured, "GET", "/heartbeat", auth="Bearer wrong")[0] == 200
    assert refused_total(secured, port=secured.metrics_port) >= 0  # read-only counters, open


def test_a_flood_of_refusals_is_counted_in_full_and_logged_in_a_few_lines(secured):
    before = refused_total(secured)
    lines_before = secured.log(0).count(REFUSED_LINE)
    for _ in range(200):
        assert call(secured, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}',
                    auth="Bearer guess")[0] == 401
    assert refused_total(secured) - before == 200
    assert secured.log(0).count(REFUSED_LINE) - lines_before <= 2


def test_refusals_are_logged_at_most_once_per_interval():
    """Pure logic, with a clock of the test's own."""
    now = [100.0]
    lines = []
    auth = BearerAuth(b"t" * 40, lambda event, **f: lines.append(f), clock=lambda: now[0])
    for _ in range(50):
        auth.refused("10.0.0.9", "PUT", "/api/v1/bookie/gc", MISSING)
    now[0] += LOG_INTERVAL_S
    auth.refused("10.0.0.9", "GET", "/metrics", MISSING)
    assert auth.refused_total == 51
    assert [x["refused_since_last_line"] for x in lines] == [1, 50]
    assert auth.refusal("GET", "/heartbeat", []) is None
    assert auth.refusal("GET", "/metrics", ["Bearer " + "t" * 40]) is None
    assert auth.refusal("GET", "/metrics", ["Bearer " + "t" * 40] * 2) is not None


@settings(max_examples=300, deadline=None)
@given(sent=st.text(alphabet=st.characters(max_codepoint=0x17f), max_size=80),
       scheme=st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", ""]),
       near=st.booleans())
def test_only_the_token_itself_is_admitted(sent, scheme, near):
    """Pure logic: whatever a header holds, it admits exactly when it is Bearer + the token."""
    token = "0123456789abcdefghijklmnopqrstuvwxyz-_"
    auth = BearerAuth(token.encode(), lambda *a, **f: None)
    if near:  # the token with a few characters changed, added or removed
        sent = token[:len(sent) % len(token)] + sent[:3] + token[len(sent) % len(token) + 1:]
    header = f"{scheme} {sent}" if scheme else sent
    admitted = auth.refusal("PUT", "/api/v1/bookie/gc", [header]) is None
    h = header.strip()
    assert admitted == (h[:7].lower() == "bearer " and h[7:].strip() == token)
    if admitted:
        assert token in sent
    assert auth.refusal("PUT", "/api/v1/bookie/gc", [f"Bearer {token}"]) is None


# ---- start-up: the token file and the exposure rule ---------------------------------------------

def _token_file(path, content: bytes, mode: int = 0o600) -> str:
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, mode)
    return str(path)


def _conf(**keys) -> BookieConfig:
    return BookieConfig.from_mapping({"ledgerDirectories": "/tmp", "httpServerEnabled": "true",
                                      **keys}, check_dirs=False)


def test_bad_token_files_are_refused_in_one_line_naming_the_key_and_the_file(tmp_path):
    good = "k" * 43
    cases = {
        str(tmp_path / "absent"): "cannot read",
        str(tmp_path): "not a regular file",
        _token_file(tmp_path / "open", good.encode(), 0o644): r"open to group or other \(mode 0644\)",
        _token_file(tmp_path / "group", good.encode(), 0o640): r"open to group or other \(mode 0640\)",
        _token_file(tmp_path / "empty", b""): "is empty",
        _token_file(tmp_path / "blank", b"\n"): "is empty",
        _token_file(tmp_path / "short", b"k" * 31 + b"\n"): "31 characters, at least 32",
        _token_file(tmp_path / "two", f"{good}\n{good}\n".encode()): "must hold one line",
        _token_file(tmp_path / "space", f"{good} {good}\n".encode()): "must hold one line",
        _token_file(tmp_path / "huge", b"k" * 5000): "must hold one line",
    }
    for path, why in cases.items():
        with pytest.raises(StartRefused, match=why) as e:
            check_admin_security(_conf(httpServerAuthTokenFile=path))
        message = str(e.value)
        assert message.startswith("httpServerAuthTokenFile: ") and path in message
        assert "\n" not in message
        assert good not in message
    for content in (good, good + "\n", good + "\r\n", "a-B_c.d~e+f/" * 3 + "=="):
        path = _token_file(tmp_path / "ok", content.encode())
        assert load_admin_token(path) == content.rstrip("\r\n").encode()


def test_an_unauthenticated_api_beyond_loopback_is_refused_unless_the_operator_opts_out(tmp_path):
    for host in ("0.0.0.0", "10.1.2.3", "::"):
        with pytest.raises(StartRefused, match=r"without httpServerAuthTokenFile.*gentoken.*"
                                               r"httpServerAllowUnauthenticated=true"):
            check_admin_security(_conf(httpServerHost=host))
        token, (level, line) = check_admin_security(
            _conf(httpServerHost=host, httpServerAllowUnauthenticated="true"))
        assert token is None and level == "warning" and "anyone who reaches" in line
        path = _token_file(tmp_path / "t", b"k" * 40)
        assert check_admin_security(_conf(httpServerHost=host, httpServerAuthTokenFile=path)) == (
            b"k" * 40, None)
    token, (level, line) = check_admin_security(_conf())  # loopback: serves, and says so
    assert token is None and level == "warning" and "any user of this host" in line
    assert check_admin_security(_conf(httpServerEnabled="false", httpServerHost="0.0.0.0")) == (
        None, None)
    assert "httpServerAuthTokenFile ignored" in _conf(
        httpServerEnabled="false", httpServerAuthTokenFile=path).warnings[0]


@pytest.mark.parametrize("case", ["open token file", "beyond loopback without a token"])
def test_the_bookie_process_refuses_to_start_in_one_line_with_status_2(tmp_path, case):
    if case == "open token file":
        conf = {"httpServerAuthTokenFile": _token_file(tmp_path / "t", b"k" * 40, 0o644)}
        why = r"httpServerAuthTokenFile: \S+ is open to group or other"
    else:
        conf = {"httpServerHost": "0.0.0.0"}
        why = "httpServerHost=0.0.0.0 without httpServerAuthTokenFile"
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf, admin_http=True,
                       start_timeout_s=30)
    try:
        with pytest.raises(LocalBookieError, match=rf"(?s)exited with status 2.*{why}"):
            ens.start(0)
        log = ens.log(0)
        assert "Traceback" not in log and log.count("refusing to start") == 1, log
    finally:
        ens.close()


# ---- bookie shell gentoken -----------------------------------------------------------------------

def _gentoken(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", "shell", "gentoken", *args],
                          capture_output=True, text=True, timeout=60)


def test_gentoken_writes_a_private_token_and_never_replaces_a_file(tmp_path):
    path = str(tmp_path / "admin.token")
    r = _gentoken(path)
    assert r.returncode == 0 and path in r.stdout, r
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    with open(path, "rb") as f:
        content = f.read()
    token = load_admin_token(path)  # what gentoken writes, the bookie takes
    assert content == token + b"\n" and len(token) == 43 and token.decode() not in r.stdout
    r = _gentoken(path)
    assert r.returncode == 2 and "exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r
    with open(path, "rb") as f:
        assert f.read() == content
    gentoken(str(tmp_path / "other"))
    assert load_admin_token(str(tmp_path / "other")) != token  # random, not a constant
    os.symlink(str(tmp_path / "target"), str(tmp_path / "link"))
    with pytest.raises(Exception, match="exists"):
        gentoken(str(tmp_path / "link"))
    assert not os.path.exists(tmp_path / "target")

