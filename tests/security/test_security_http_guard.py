"""The HTTP servers against a browser and a slow client (issue 22, findings 8 and 4).

Against a real bookie serving the admin API on loopback without a token, and /metrics:

- DNS rebinding: a request whose ``Host`` is another name (what a browser sends to a page whose
  name an attacker pointed at 127.0.0.1) is 403 and changes nothing; the bookie's own names work.
- Slowloris: 40 connections per server trickling a header byte a second never finish a request;
  meanwhile every ``GET /heartbeat`` and every scrape of /metrics is answered at once, and a
  connection that keeps trickling is closed at ``httpServerRequestTimeoutMs`` although it is
  never idle for ``httpServerIdleTimeoutMs``.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

REQUEST_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    metrics_port = free_port_pair("127.0.0.1")
    conf = {"prometheusStatsHttpPort": metrics_port, "gcWaitTime": 600_000,
            "httpServerRequestTimeoutMs": REQUEST_TIMEOUT_MS}
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("guard")), conf=conf,
                      admin_http=True) as e:
        e.metrics_port = metrics_port
        yield e
        assert "Traceback" not in e.log(0), e.log(0)[-3000:]


def call(port: int, method: str, path: str, body: bytes | None = None,
         host: str | None = None, timeout_s: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.putrequest(method, path, skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        if body is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def readonly(ens) -> bool:
    status, raw = call(ens.http_ports[0], "GET", "/api/v1/bookie/state/readonly")
    assert status == 200, raw
    return json.loads(raw)["readOnly"]


def test_a_foreign_host_cannot_put_the_unauthenticated_bookie_read_only(ens):
    port = ens.http_ports[0]
    for host in (f"rebind.attacker.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}"):
        status, raw = call(port, "PUT", "/api/v1/bookie/state/readonly", b'{"readOnly": true}', host=host)
        assert status == 403, (host, status, raw)
        assert "httpServerAllowedHosts" in json.loads(raw)["error"]
        status, _ = call(port, "GET", "/api/v1/config/server_config", host=host)
        assert status == 403
        status, _ = call(ens.metrics_port, "GET", "/metrics", host=host)
        assert status == 403
    assert readonly(ens) is False
    # the bookie's own names still serve, and a probe's heartbeat is never refused
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        assert call(port, "GET", "/api/v1/bookie/state", host=host)[0] == 200, host
    assert call(port, "GET", "/heartbeat", host="anything.example")[0] == 200
    assert call(ens.metrics_port, "GET", "/metrics", host=f"127.0.0.1:{ens.metrics_port}")[0] == 200


class Trickler:
    """``n`` connections to ``port``, each sending one byte of a request head a second and never
    finishing it; a connection the server closes is opened again at once."""

    def __init__(self, port: int, n: int):
        self.port = port
        self.socks = [self._open() for _ in range(n)]
        self.closed_by_server = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(b"GET /heartbeat HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        return s

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            for i, s in enumerate(self.socks):
                try:
                    s.sendall(b"X")
                    s.setblocking(False)
                    try:
                        gone = s.recv(4096, socket.MSG_PEEK) == b""
                    except BlockingIOError:
                        gone = False
                    s.setblocking(True)
                except OSError:
                    gone = True
                if gone:
                    self.closed_by_server += 1
                    s.close()
                    try:
                        self.socks[i] = self._open()
                    except OSError:
                        pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def test_slow_clients_never_keep_heartbeat_or_metrics_from_answering(ens):
    with Trickler(ens.http_ports[0], 40) as admin_flood, Trickler(ens.metrics_port, 40) as metrics_flood:
        time.sleep(1.5)  # every place of both servers taken
        t_end = time.monotonic() + 2 * REQUEST_TIMEOUT_MS / 1000 + 1
        answered = 0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            status, raw = call(ens.http_ports[0], "GET", "/heartbeat", timeout_s=5)
            assert status == 200, raw
            status, raw = call(ens.metrics_port, "GET", "/metrics", timeout_s=5)
            assert status == 200 and b"bookie_info" in raw
            assert time.monotonic() - t0 < 3.0
            answered += 1
            time.sleep(0.3)
        assert answered >= 5
        # every trickling connection was cut at the request deadline (or evicted), never idle
        assert admin_flood.closed_by_server >= 40 and metrics_flood.closed_by_server >= 40


def test_a_trickling_request_is_closed_at_the_request_deadline(ens):
    s = socket.create_connection(("127.0.0.1", ens.http_ports[0]), timeout=10)
    try:
        t0 = time.monotonic()
        s.sendall(b"GET /heartbeat HTTP/1.1\r\n")
        closed_after = None
        while time.monotonic() - t0 < 10:
            time.sleep(0.25)
            try:
                s.sendall(b"X")
                s.setblocking(False)
                try:
                    if s.recv(4096, socket.MSG_PEEK) == b"":
                        closed_after = time.monotonic() - t0
                        break
                except BlockingIOError:
                    pass
                s.setblocking(True)
            except OSError:
                closed_after = time.monotonic() - t0
                break
        assert closed_after is not None, "still open after 10 s of trickling"
        assert REQUEST_TIMEOUT_MS / 1000 - 0.5 <= closed_after <= REQUEST_TIMEOUT_MS / 1000 + 2.0
    finally:
        s.close()
