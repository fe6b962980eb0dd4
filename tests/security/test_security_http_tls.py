"""Optional TLS for the admin API and /metrics (issue 22: httpServerTlsCertFile /
httpServerTlsKeyFile).  A real bookie with a self-signed certificate: both servers answer
HTTPS, verified against that certificate, and a plain HTTP request gets no answer; a key file
open to others, or one key without the other, is refused at start in one line, exit status 2.
"""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess

import pytest

from bookie.testing import LocalBookieError, LocalBookies
from bookie.workers.ports import free_port_pair


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    crt, key = str(d / "admin.crt"), str(d / "admin.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    os.chmod(key, 0o600)
    return crt, key


def test_both_http_servers_speak_tls_only(cert, tmp_path):
    crt, key = cert
    metrics_port = free_port_pair("127.0.0.1")
    conf = {"httpServerTlsCertFile": crt, "httpServerTlsKeyFile": key,
            "prometheusStatsHttpPort": metrics_port}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf, admin_http=True) as ens:
        context = ssl.create_default_context(cafile=crt)
        for port, path in ((ens.http_ports[0], "/heartbeat"), (ens.http_ports[0], "/api/v1/bookie/state"),
                           (metrics_port, "/metrics")):
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                assert r.status == 200, (path, r.read())
                r.read()
            finally:
                conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=10)
        try:
            with pytest.raises((http.client.HTTPException, OSError)):
                plain.request("GET", "/heartbeat")
                plain.getresponse().read()
        finally:
            plain.close()
        assert "Traceback" not in ens.log(0)


def test_a_key_open_to_others_or_half_the_pair_is_refused_at_start(cert, tmp_path):
    crt, key = cert
    open_key = str(tmp_path / "open.key")
    with open(key, "rb") as f, open(open_key, "wb") as g:
        g.write(f.read())
    os.chmod(open_key, 0o644)
    for conf, says in (({"httpServerTlsCertFile": crt, "httpServerTlsKeyFile": open_key}, "chmod 600"),
                       ({"httpServerTlsCertFile": crt}, "go together")):
        with pytest.raises(LocalBookieError) as refused:
            with LocalBookies(1, base_dir=str(tmp_path / f"e{len(conf)}"), conf=conf, admin_http=True):
                pass
        assert "exited with status 2" in str(refused.value) and says in str(refused.value)
