"""Log lines (bookie.workers.logs): logfmt and JSON, levels, tracebacks, Python logging."""

from __future__ import annotations

import json
import logging
import re
import sys

from hypothesis import given
from hypothesis import strategies as st

from bookie.workers import logs

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
keys = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)


@given(st.dictionaries(keys, values, max_size=6))
def test_any_field_values_read_back_from_a_logfmt_line(fields):
    line = logs.format_line("bookie[3181] add", "request failed", "error", fields, "logfmt")
    assert "\n" not in line
    got = logs.parse_line(line)
    assert got.pop("event") == "request failed" and got.pop("level") == "error"
    assert got.pop("process") == "bookie[3181] add" and TS.match(got.pop("ts"))
    assert got == {logs.field_name(k): v for k, v in fields.items()}


@given(st.dictionaries(keys, values, max_size=6))
def test_any_field_values_read_back_from_a_json_line(fields):
    line = logs.format_line("bookie[3181] journal", "journal ready", "info", fields, "json")
    got = json.loads(line)
    assert got["role"] == "journal" and got["bookie_port"] == 3181 and got["event"] == "journal ready"
    assert TS.match(got["ts"]) and got["level"] == "info"
    for k, v in fields.items():
        assert got[logs.field_name(k, "json")] == v


def test_values_are_quoted_only_when_they_need_it():
    line = logs.format_line("bookie[1] supervisor", "worker died; restarting it", "warning",
                            {"role": "add", "cause": "signal 9", "note": 'say "hi"', "empty": ""}, "logfmt")
    assert 'worker died; restarting it role=add cause="signal 9" note="say \\"hi\\"" empty=""' in line
    assert line.split(" ")[1] == "warning"


def test_levels_follow_the_event_words_unless_given():
    assert logs.level_of("bookie serving") == "info"
    assert logs.level_of("worker died; restarting it") == "warning"
    assert logs.level_of("warning: journal damage that replay does not need") == "warning"
    assert logs.level_of("refusing to start: corrupt journal") == "error"
    assert logs.level_of("journal write failed; stopping the bookie") == "error"


def test_a_traceback_is_one_error_line_and_a_debug_line(capsys, monkeypatch):
    def boom():
        raise ValueError("bad thing")
    for level, expected_lines in (("info", 1), ("debug", 2)):
        monkeypatch.setenv(logs.LEVEL_ENV, level)
        try:
            boom()
        except ValueError as e:
            logs.emit_exception("bookie[1] add", "fatal", e)
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == expected_lines
        first = logs.parse_line(lines[0])
        assert first["level"] == "error" and first["error"] == "ValueError: bad thing"
        if expected_lines == 2:
            tb = logs.parse_line(lines[1])
            assert tb["level"] == "debug" and "Traceback" in tb["traceback"] and "boom" in tb["traceback"]


def test_python_logging_records_become_the_same_lines(capsys, monkeypatch):
    monkeypatch.setenv(logs.FORMAT_ENV, "json")
    logger = logging.getLogger("bookie.client.test")
    handler = logging.StreamHandler()
    handler.setFormatter(logs.LineFormatter())
    logger.addHandler(handler)
    # Only this handler: an in-process CLI run earlier in the session may have put its own on
    # the "bookie" logger, which would print the record a second time.
    monkeypatch.setattr(logger, "propagate", False)
    try:
        logger.warning("ensemble changed", extra={"fields": {"ledger_id": 5, "failed": "127.0.0.1:3181"}})
    finally:
        logger.removeHandler(handler)
    got = json.loads(capsys.readouterr().err)
    assert got["event"] == "ensemble changed" and got["level"] == "warning"
    assert got["process"] == "bookie.client.test" and got["ledger_id"] == 5


def test_installed_logging_writes_to_the_current_stderr_not_a_closed_one(monkeypatch):
    # A CLI run in-process installs the handler while sys.stderr is one stream; records logged
    # after that stream is replaced (and closed) must reach the current one, not raise.
    import io
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.install_logging("bookie.test_install")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logger = logging.getLogger("bookie.test_install")
    try:
        logger.error("ledger recovered and closed")
    finally:
        logger.handlers.clear()
    assert "Logging error" not in second.getvalue()
    assert logs.parse_line(second.getvalue().strip())["event"] == "ledger recovered and closed"
