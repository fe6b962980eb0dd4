"""Each benchmark tool end to end on a tiny setting against real bookies: its JSON line parses and
holds every field bench/README.md documents, its counts add up, and bad options are one clear
line.  Never a speed."""

import os
import re

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.testing import LocalBookies

LOST = ("phases.lost_replica", "figures.lost_replica_ratio", "figures.lost_bookie")
README = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "README.md")


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
def three_bookies():
    with LocalBookies(3) as ens:
        yield ens


def test_bench_bookie_end_to_end(capsys, three_bookies, tmp_path):
    results = tmp_path / "results.jsonl"
    from bookie.metadata import open_metadata
    with open_metadata(three_bookies.metadata_uri) as store:
        before = set(store.list_ledgers())
    rc, result, err = run_tool(capsys, "bookie", "--bookie", three_bookies.bookies[0],
                               "--metadata", three_bookies.metadata_uri,
                               "--time", "1", "--sync-time", "0.3", "--warmup-messages", "200",
                               "--json-out", str(results))
    assert rc == 0
    # the run's ledgers were created in the store (a bookie stores nothing under ids it does
    # not know) and removed after it
    with open_metadata(three_bookies.metadata_uri) as store:
        assert set(store.list_ledgers()) == before
    assert_documented_fields(result)
    sync, pipelined = result["phases"]["sync"], result["phases"]["pipelined"]
    assert sync["ops"] > 0 and pipelined["ops"] > 0 and pipelined["errors"] == 0
    assert pipelined["latency_ms"]["count"] == pipelined["ops"]
    assert pipelined["bytes"] == pipelined["ops"] * 1024
    assert result["params"]["batch"] == 100 and result["params"]["bookie"] == three_bookies.bookies[0]
    assert "[pipelined]" in err and "latency ms: p50" in err
    assert orjson.loads(results.read_text()) == result


def test_bench_bookie_starts_its_own_bookie(capsys, tmp_path):
    rc, result, _ = run_tool(capsys, "bookie", "--localbookie", "--data-dir", str(tmp_path),
                             "--time", "0.5", "--sync-time", "0", "--warmup-messages", "0",
                             "--sendlimit", "3000", "--quiet")
    assert rc == 0 and result["phases"]["pipelined"]["ops"] == 3000
    assert "sync" not in result["phases"]
    assert result["host"]["disk"]["path"] == str(tmp_path)


def test_bench_writes_end_to_end(capsys, three_bookies, tmp_path):
    latency_file = tmp_path / "latencies.txt"
    rc, result, err = run_tool(capsys, "writes", "--metadata", three_bookies.metadata_uri,
                               "--ensemble", "3", "--quorum", "2", "--ack-quorum", "2",
                               "--time", "1", "--ledgers", "2", "--throttle", "500",
                               "--warmup-messages", "100", "--latency-file", str(latency_file))
    assert rc == 0
    assert_documented_fields(result)
    writes = result["phases"]["writes"]
    assert writes["ops"] > 0 and writes["errors"] == 0 and len(writes["ledgers"]) == 2
    assert writes["latency_ms"]["count"] == writes["ops"]
    assert writes["bytes"] == writes["ops"] * 1024
    assert result["params"]["ack_quorum"] == 2 and result["figures"]["entry_bytes"] == 32 + 8 + 1024
    latencies = latency_file.read_text().split()
    assert len(latencies) == writes["ops"] and all(int(x) >= 0 for x in latencies)
    assert "[writes]" in err


def test_bench_writes_deferred_sync_forces_at_the_end(capsys, three_bookies):
    rc, result, _ = run_tool(capsys, "writes", "--metadata", three_bookies.metadata_uri,
                             "--ensemble", "3", "--quorum", "2", "--time", "1",
                             "--throttle", "50", "--write-flags", "DEFERRED_SYNC", "--quiet")
    writes = result["phases"]["writes"]
    assert rc == 0 and writes["ops"] > 0 and writes["errors"] == 0
    assert result["params"]["write_flags"] == ["deferred_sync"] and writes["force_ms"] >= 0


def test_bench_writes_sendlimit_and_rate_on_its_own_bookie(capsys, tmp_path):
    rc, result, _ = run_tool(capsys, "writes", "--localbookie", "1", "--data-dir", str(tmp_path),
                             "--ensemble", "1", "--quorum", "1", "--time", "5",
                             "--sendlimit", "600", "--rate", "1000", "--warmup-messages", "0",
                             "--quiet")
    writes = result["phases"]["writes"]
    assert rc == 0 and writes["ops"] == 600
    assert 0.5 <= writes["duration_s"] < 5  # paced: 600 adds at 1000/s


def test_bench_reads_of_a_closed_ledger(capsys, three_bookies):
    rc, result, err = run_tool(capsys, "reads", "--metadata", three_bookies.metadata_uri,
                               "--ensemble", "1", "--quorum", "1", "--entries", "3000",
                               "--batch", "500", "--time", "5")
    assert rc == 0
    assert_documented_fields(result, absent=("phases.tail", "phases.writer", *LOST))
    seq = result["phases"]["sequential"]
    assert seq["ops"] == 3000 and seq["last_entry_id"] == 2999 and seq["bytes"] == 3000 * 1024
    assert seq["latency_ms"]["count"] == 3000
    # the same ledger again, named with --ledger
    (ledger_id,) = result["figures"]["ledgers"]
    rc, again, _ = run_tool(capsys, "reads", "--metadata", three_bookies.metadata_uri,
                            "--ledger", str(ledger_id), "--batch", "1000", "--quiet")
    assert rc == 0 and again["phases"]["sequential"]["ops"] == 3000


def test_bench_reads_tailing_a_writer(capsys, three_bookies):
    rc, result, err = run_tool(capsys, "reads", "--metadata", three_bookies.metadata_uri,
                               "--listen", "2", "--ensemble", "2", "--quorum", "2",
                               "--time", "1", "--throttle", "200", "--rate", "4000")
    assert rc == 0
    assert_documented_fields(result, absent=("phases.sequential", *LOST))
    tail = result["phases"]["tail"]
    assert tail["ops"] == tail["written"] == result["phases"]["writer"]["ops"] > 0
    assert tail["lag_ms"]["count"] == tail["e2e_ms"]["count"] == tail["ops"]
    assert tail["lag_ms"]["p50"] <= tail["e2e_ms"]["p50"]
    assert len(result["figures"]["ledgers"]) == 2


def test_bench_reads_losing_a_replica_mid_read(capsys):
    rc, result, err = run_tool(capsys, "reads", "--localbookie", "3", "--ensemble", "3",
                               "--quorum", "2", "--entries", "6000", "--batch", "500",
                               "--lose-replica-at", "2000", "--time", "30")
    assert rc == 0
    assert_documented_fields(result, absent=("phases.tail", "phases.writer"))
    lost = result["phases"]["lost_replica"]
    assert lost["ops"] == result["phases"]["sequential"]["ops"] == 6000 and lost["errors"] == 0
    assert result["figures"]["lost_replica_ratio"] > 0
    assert "stopped (SIGSTOP) after 2000 entries" in err


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
    (["bookie", "--bookie", "127.0.0.1:3181", "--trace"], "--trace needs --localbookie"),
    (["journal", "--dir", "/nonexistent"], "--dir: /nonexistent is not a directory"),
    (["journal", "--dir", "/tmp", "--group-bytes", "0"], "--group-bytes must be positive"),
    (["writes", "--metadata", "lmdb:///x", "--ensemble", "2", "--quorum", "3"],
     "quorums must satisfy ensemble >= quorum >= ack-quorum >= 1, got --ensemble 2 --quorum 3"),
    (["writes", "--metadata", "lmdb:///x", "--quorum", "2", "--ack-quorum", "3"],
     "ack-quorum 3"),
    (["writes", "--localbookie", "2", "--ensemble", "3"],
     "--ensemble 3 needs at least that many bookies, --localbookie starts 2"),
    (["writes", "--metadata", "lmdb:///x", "--throttle", "0"], "--throttle must be positive"),
    (["writes", "--metadata", "lmdb:///x", "--write-flags", "deferred_sync,fast"],
     "--write-flags: unknown write flag 'fast' (known: deferred_sync)"),
    (["writes", "--metadata", "lmdb:///x", "--rate", "-5"], "--rate must be positive"),
    (["writes", "--metadata", "lmdb:///x", "--latency-file", "/nonexistent/l.txt"],
     "--latency-file: directory /nonexistent does not exist"),
    (["reads", "--localbookie", "1", "--ledger", "3"], "--ledger reads an existing ledger"),
    (["reads", "--metadata", "lmdb:///x", "--rate", "5"],
     "--rate paces the tailed writer: it needs --listen"),
    (["reads", "--metadata", "lmdb:///x", "--lose-replica-at", "5"],
     "--lose-replica-at stops a bookie this tool starts"),
    (["reads", "--localbookie", "3", "--ensemble", "3", "--lose-replica-at", "5"],
     "--lose-replica-at needs a write quorum of 2 or more"),
    (["reads", "--localbookie", "2", "--ensemble", "2", "--quorum", "2", "--entries", "10",
      "--lose-replica-at", "10"], "--lose-replica-at 10 must be below --entries 10"),
    (["reads", "--metadata", "lmdb:///x", "--listen", "1", "--entrysize", "4"],
     "--entrysize must be at least 8 with --listen"),
    (["spark", "--metadata", "lmdb:///x", "--json-out", "/nonexistent/dir/s.json"],
     "--json-out: directory /nonexistent/dir does not exist"),
])
def test_bad_options_are_one_clear_line(capsys, argv, message):
    assert main(["bench", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bookie bench: ") and message in lines[0]
