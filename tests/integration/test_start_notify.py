"""A bookie says it serves on ``NOTIFY_SOCKET`` (systemd's notify protocol), and LocalBookies
waits for that notice instead of finding the log line at its next look; the log line stays the
record, so a bookie that cannot reach the socket still counts as started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from bookie.testing import LocalBookies


def _fields(datagram: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in datagram.decode().splitlines())


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_a_bookie_sends_ready_once_serving_and_stopping_when_asked_to_stop(tmp_path, kind):
    ens = LocalBookies(1, base_dir=str(tmp_path / "ens"))  # for its configuration only
    ens._init_metadata()  # noqa: SLF001 - the store the bookie registers in
    overrides = ens.overrides(0)
    for key in ("journalDirectory", "ledgerDirectories"):
        os.makedirs(overrides[key], exist_ok=True)
    sock_dir = tempfile.mkdtemp(prefix="notify-")  # a short path: sockets allow ~100 bytes
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if kind == "path":
        address = os.path.join(sock_dir, "n")
        listener.bind(address)
    else:
        address = f"@bookie-test-notify-{os.getpid()}"
        listener.bind("\0" + address[1:])
    listener.settimeout(60)
    log_path = tmp_path / "bookie.log"
    cmd = [sys.executable, "-m", "bookie", "run"]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={v}"]
    with open(log_path, "wb") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             env={**os.environ, "NOTIFY_SOCKET": address})
    try:
        ready = _fields(listener.recv(4096))
        assert ready == {"READY": "1", "MAINPID": str(p.pid)}
        assert "bookie serving" in log_path.read_text()  # the line comes first: it is the record
        p.send_signal(signal.SIGTERM)
        assert _fields(listener.recv(4096)) == {"STOPPING": "1", "MAINPID": str(p.pid)}
        assert p.wait(30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        p.wait(30)
        listener.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert "could not notify" not in log_path.read_text()


def test_local_bookies_start_when_the_bookie_cannot_reach_the_notify_socket(tmp_path, monkeypatch):
    monkeypatch.setattr(LocalBookies, "_notify_socket", lambda self, i: str(tmp_path / "none" / "n"))
    with LocalBookies(1, base_dir=str(tmp_path / "ens")) as ens:
        # the start returns at the "bookie serving" line; the notice is tried just after it
        deadline = time.monotonic() + 10
        while "could not notify" not in ens.log(0) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "could not notify" in ens.log(0)
        assert "bookie serving" in ens.log(0)


def test_local_bookies_started_again_wait_for_the_new_start_not_an_old_notice(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "ens")) as ens:
        ens.stop(0)
        ens._notify[0].sendto(b"READY=1", ens._notify[0].getsockname())  # noqa: SLF001 - a stale notice
        ens.start(0, wait=False)  # drops what was sent before it
        offset = ens._log_offsets[0]  # noqa: SLF001
        ens.wait_serving(0)
        assert "bookie serving" in ens._log_since(0, offset)  # noqa: SLF001
