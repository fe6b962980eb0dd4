"""Log lines of a real bookie and of the client, read back as logfmt and as JSON."""

from __future__ import annotations

import json
import logging
import re

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.workers import logs

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ROLES = {"supervisor", "journal", "add", "read", "gc"}


def _exercise(ens) -> None:
    """Start-up, a write and read through the client, a worker killed and restarted, a stop."""
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        lh.add_entry(b"hello")
        lh.close()
    old = ens.kill_worker(0, "read")
    ens.wait_worker_restarted(0, "read", old) if ens.log_format is None else _wait_json_restart(ens, old)
    ens.stop(0)


def _wait_json_restart(ens, old_pid) -> None:
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in ens.log(0).splitlines():
            rec = json.loads(line)
            if rec["event"] == "worker started" and rec.get("role_") == "read" and rec["pid"] != old_pid:
                return
        time.sleep(0.1)
    raise AssertionError(ens.log(0)[-3000:])


def test_every_line_of_a_bookie_is_logfmt_with_time_level_role_event(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        _exercise(ens)
        text = ens.log(0)
    records = [logs.parse_line(line) for line in text.splitlines()]
    assert len(records) > 10
    for rec in records:
        assert TS.match(rec["ts"]) and rec["level"] in logs.LEVELS
        assert rec["process"].split()[-1] in ROLES and rec["event"]
    events = {r["event"] for r in records}
    assert {"bookie serving", "replay done", "worker died; restarting it", "bookie stopped"} <= events
    died = next(r for r in records if r["event"] == "worker died; restarting it")
    assert died["level"] == "warning" and died["role"] == "read" and died["cause"] == "signal 9"
    assert "worker died; restarting it role=read" in text  # what grep-based tools look for
    replay = next(r for r in records if r["event"] == "replay done")
    assert float(replay["seconds"]) >= 0 and int(replay["records"]) >= 0


def test_log_format_json_gives_one_json_object_per_line_from_every_process(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), log_format="json") as ens:
        _exercise(ens)
        text = ens.log(0)
    records = [json.loads(line) for line in text.splitlines()]
    assert {r["role"] for r in records} == ROLES
    for rec in records:
        assert TS.match(rec["ts"]) and rec["level"] in logs.LEVELS and rec["event"]
        assert rec["bookie_port"] == ens.ports[0]
    died = next(r for r in records if r["event"] == "worker died; restarting it")
    assert died["level"] == "warning" and died["role_"] == "read" and died["cause"] == "signal 9"


def test_the_client_logs_fencing_and_recovery_on_bookie_client(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="bookie.client")
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        with BookKeeper(ens.metadata_uri) as writer, BookKeeper(ens.metadata_uri) as reader:
            lh = writer.create_ledger(1, 1, 1, password=b"pw")
            lh.add_entry(b"unclosed")
            rh = reader.open_ledger(lh.ledger_id, password=b"pw")  # recovers: fences the writer
            assert rh.last_add_confirmed == 0
    ours = [r for r in caplog.records if r.name == "bookie.client"]
    events = [r.getMessage() for r in ours]
    assert "ledger recovery started" in events and "fencing ledger" in events
    assert "ledger recovered and closed" in events
    line = logs.LineFormatter("logfmt").format(next(r for r in ours if r.getMessage() == "fencing ledger"))
    rec = logs.parse_line(line)
    assert rec["process"] == "bookie.client" and rec["ledger_id"] == str(lh.ledger_id)
    assert rec["bookie"] == ens.bookies[0] and rec["level"] == "info"


@pytest.mark.parametrize("flag", ["--log-format=xml", "--log-level=loud"])
def test_a_bad_log_flag_is_a_usage_error(flag):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "bookie", "run", flag], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr and "Traceback" not in r.stderr
