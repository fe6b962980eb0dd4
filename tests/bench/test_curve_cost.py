"""The pinned CURVE's cost (bench/curve_cost.py): its plain baseline really is in the clear and
only on loopback, and the alternating run prints a ratio per window."""

import subprocess
import sys

import orjson
import pytest
import zmq

from bookie import wire
from bookie.appliance.startchecks import StartRefused, check_client_security
from bookie.testing import LocalBookies
from bookie.testing.rawclient import known_resolver
from bookie.wire import Op, Status
from bookie.workers.auth import PLAINTEXT_ENV
from bookie.workers.config import BookieConfig


def _info_in_the_clear(address: str) -> int | None:
    """The status of an INFO sent without CURVE to ``address``'s read socket (None: no answer)."""
    host, port = address.rsplit(":", 1)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(f"tcp://{host}:{int(port) + 1}")
        s.send_multipart([wire.pack_header(Op.INFO, 0, 1, 0)])
        if not s.poll(3000):
            return None
        return wire.unpack_header(s.recv_multipart()[0])[1]
    finally:
        s.close()
        ctx.term()


def test_plain_baseline_publishes_no_key_and_answers_in_the_clear(monkeypatch):
    monkeypatch.setenv(PLAINTEXT_ENV, "1")
    with LocalBookies(1) as lb:
        bookie = lb.bookies[0]
        assert known_resolver(bookie).resolve(bookie).key == b""  # nothing to pin
        assert _info_in_the_clear(bookie) == Status.OK
        assert "in the clear" in lb.log(0)


def test_default_bookie_publishes_its_key_and_ignores_the_clear(monkeypatch):
    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    with LocalBookies(1) as lb:
        bookie = lb.bookies[0]
        assert len(known_resolver(bookie).resolve(bookie).key) == 40
        assert _info_in_the_clear(bookie) is None


def test_plain_baseline_is_refused_beyond_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv(PLAINTEXT_ENV, "1")
    conf = BookieConfig.load(overrides={"listeningInterface": "0.0.0.0",
                                        "journalDirectories": str(tmp_path / "j"),
                                        "ledgerDirectories": str(tmp_path / "l")},
                             check_dirs=False)
    with pytest.raises(StartRefused, match=f"{PLAINTEXT_ENV}=1.*loopback only"):
        check_client_security(conf)


def test_alternating_run_prints_a_ratio_per_window():
    out = subprocess.run([sys.executable, "-m", "bookie.bench.curve_cost", "--rounds", "1",
                          "--time", "1", "--in-flight", "1"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [orjson.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert sorted(ln["curve"] for ln in lines if "curve" in ln) == ["off", "on"]
    summary = [ln for ln in lines if ln.get("tool") == "curve_cost"]
    assert len(summary) == 1 and summary[0]["in_flight"] == 1
    assert set(summary[0]["ratio"]) == {"ops_per_s", "p50_ms", "cpu_us"}
    assert "1 in flight, 1 rounds" in out.stdout


def test_bad_window_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "bookie.bench.curve_cost", "--in-flight", "1,x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--in-flight 1,x" in out.stderr and "Traceback" not in out.stderr
