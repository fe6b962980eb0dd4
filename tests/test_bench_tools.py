"""Each benchmark tool end to end on a tiny setting against real bookies: its JSON line parses and
holds every field bench/README.md documents, its counts add up, and bad options are one clear
line.  Never a speed."""

import os
import re

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.testing import LocalBookies

README = os.path.join(os.path.dirname(__file__), "..", "bench", "README.md")


def documented_fields(tool: str) -> list[str]:
    """The README's JSON-line table rows that apply to ``tool``."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \|", text, flags=re.M)
    assert rows, "the README lost its field table"
    return [field for field, tools in rows
            if tools.strip() == "all" or tool in [t.strip() for t in tools.split(",")]]


def lookup(obj, path: list[str]):
    if not path:
        return [obj]
    head, rest = path[0], path[1:]
    if head == "<phase>":
        assert obj, "no phases"
        return [v for sub in obj.values() for v in lookup(sub, rest)]
    assert isinstance(obj, dict) and head in obj, f"missing {head!r}"
    return lookup(obj[head], rest)


def assert_documented_fields(result: dict, *, absent=()) -> None:
    for field in documented_fields(result["tool"]):
        if any(field.startswith(a) for a in absent):
            continue
        try:
            lookup(result, field.split("."))
        except AssertionError as e:
            raise AssertionError(f"{result['tool']}: documented field {field} absent: {e}") from None


def run_tool(capsys, *argv) -> tuple[int, dict, str]:
    rc = main(["bench", *argv])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1, captured.out
    return rc, orjson.loads(lines[0]), captured.err


@pytest.fixture(scope="module")
def one_bookie():
    with LocalBookies(1) as ens:
        yield ens


def test_bench_bookie_end_to_end(capsys, one_bookie, tmp_path):
    results = tmp_path / "results.jsonl"
    rc, result, err = run_tool(capsys, "bookie", "--bookie", one_bookie.bookies[0],
                               "--time", "1", "--sync-time", "0.3", "--warmup-messages", "200",
                               "--json-out", str(results))
    assert rc == 0
    assert_documented_fields(result)
    sync, pipelined = result["phases"]["sync"], result["phases"]["pipelined"]
    assert sync["ops"] > 0 and pipelined["ops"] > 0 and pipelined["errors"] == 0
    assert pipelined["latency_ms"]["count"] == pipelined["ops"]
    assert pipelined["bytes"] == pipelined["ops"] * 1024
    assert result["params"]["batch"] == 100 and result["params"]["bookie"] == one_bookie.bookies[0]
    assert "[pipelined]" in err and "latency ms: p50" in err
    assert orjson.loads(results.read_text()) == result


def test_bench_bookie_starts_its_own_bookie(capsys, tmp_path):
    rc, result, _ = run_tool(capsys, "bookie", "--localbookie", "--data-dir", str(tmp_path),
                             "--time", "0.5", "--sync-time", "0", "--warmup-messages", "0",
                             "--sendlimit", "3000", "--quiet")
    assert rc == 0 and result["phases"]["pipelined"]["ops"] == 3000
    assert "sync" not in result["phases"]
    assert result["host"]["disk"]["path"] == str(tmp_path)


def test_bench_journal_end_to_end(capsys, tmp_path):
    rc, result, err = run_tool(capsys, "journal", "--dir", str(tmp_path), "--time", "0.5",
                               "--throttle", "2000")
    assert rc == 0
    assert_documented_fields(result)
    journal, raw = result["phases"]["journal"], result["phases"]["raw"]
    assert journal["ops"] == journal["records"] > 0 and journal["groups"] > 0
    assert journal["latency_ms"]["count"] == journal["ops"]
    assert raw["ops"] > 0 and result["figures"]["ratio"] > 0
    assert result["figures"]["raw_group_bytes"] >= 4096
    assert os.listdir(tmp_path) == []  # cleaned up
    assert "[journal]" in err and "ratio:" in err


@pytest.mark.parametrize("argv, message", [
    (["bookie", "--bookie", "nohost"], "--bookie: bookie address 'nohost' is not host:port"),
    (["bookie", "--bookie", "h:1", "--entrysize", "0"], "--entrysize must be positive, got 0"),
    (["bookie", "--bookie", "h:1", "--window", "-3"], "--window must be positive, got -3"),
    (["bookie", "--bookie", "h:1", "--batch", "70000"], "--batch must be at most 65536"),
    (["bookie", "--bookie", "h:1", "--time", "0"], "--time must be positive, got 0.0"),
    (["bookie", "--bookie", "h:1", "--json-out", "/nonexistent/dir/r.jsonl"],
     "--json-out: directory /nonexistent/dir does not exist"),
    (["journal", "--dir", "/nonexistent"], "--dir: /nonexistent is not a directory"),
    (["journal", "--dir", "/tmp", "--group-bytes", "0"], "--group-bytes must be positive"),
])
def test_bad_options_are_one_clear_line(capsys, argv, message):
    assert main(["bench", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bookie bench: ") and message in lines[0]
