"""bench report's issue table: each bookie figure as a ratio to its peer from the same results
file (pure part, with made-up results), and a short real report with Redis as the peer.
Never a speed."""

import os

import orjson

from bookie.appliance.cli import main
from bookie.bench import ratios, standard
from bookie.bench.report import Meter, build_result

S = 1_000_000_000


def phase(ops_per_s: float, p50_ms: float, p99_ms: float) -> dict:
    m = Meter("x", emit=None)
    m.start(0)
    half = int(ops_per_s) // 2
    m.record(int(p50_ms * 1_000_000), half, half * 1024)
    m.record(int(p99_ms * 1_000_000), int(ops_per_s) - half, 0)
    return m.finish(S)


def writes(ensemble, throttle, ops_per_s, p50_ms, p99_ms):
    return build_result("writes", {"ensemble": ensemble, "rate": None, "throttle": throttle,
                                   "time": 1.0}, {"writes": phase(ops_per_s, p50_ms, p99_ms)})


def peer(system, in_flight, ops_per_s, p50_ms, p99_ms, error=None):
    r = build_result("peer", {"system": system, "in_flight": in_flight, "time": 1.0},
                     {} if error else {"adds": {"ops_per_s": ops_per_s,
                                                "latency_ms": {"p50": p50_ms, "p99": p99_ms}}})
    if error:
        r["error"] = error
    return r


def row(table: str, measure: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {measure} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_rows_are_ratios_to_the_peer_of_the_same_file():
    results = [writes(1, 256, 120_000, 1.0, 4.0), peer("redis", 256, 100_000, 2.0, 6.0),
               writes(1, 1, 1000, 0.25, 1.2), peer("redis", 1, 9000, 0.1, 0.2),
               writes(3, 256, 50_000, 2.0, 9.0), peer("zookeeper", 256, 10_000, 20.0, 40.0)]
    table = ratios.render(results)
    one = row(table, ratios.ROWS[0].measure)
    assert one[1] == "120.0k/s, p99 4.00 ms" and one[3] == "1.20" and one[5] == "met"
    three = row(table, ratios.ROWS[1].measure)
    assert three[3] == "5.0" and three[5] == "missed: ratio 38% short"
    qd1 = row(table, ratios.ROWS[2].measure)
    assert qd1[1] == "0.25 ms / 1.20 ms" and qd1[3] == "2.5x Redis" and qd1[5] == "met"


def test_a_missing_or_failed_peer_says_so():
    results = [writes(1, 256, 120_000, 1.0, 4.0),
               peer("zookeeper", 256, 0, 0, 0, error="java not installed"),
               writes(3, 256, 50_000, 2.0, 9.0)]
    table = ratios.render(results)
    assert row(table, ratios.ROWS[0].measure)[1:] == [
        "redis not run", "", "", ">= 1.0, p99 <= 5 ms", "not measured"]
    assert row(table, ratios.ROWS[1].measure)[1] == "zookeeper: java not installed"
    assert row(table, ratios.ROWS[5].measure)[1] == "not run (--spark)"
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 2 + len(ratios.ROWS)


def test_a_short_report_runs_redis_beside_the_bookie(capsys, tmp_path):
    results = tmp_path / "results.jsonl"
    readme = tmp_path / "README.md"
    readme.write_text(f"{standard.BEGIN}\n{standard.END}\n")
    rc = main(["bench", "report", "--time", "0.3", "--only", "E=Qw=Qa=1, 256 in flight",
               "--peers", "redis", "--quiet", "--results", str(results), "--readme", str(readme),
               "--data-dir", str(tmp_path / "data")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = [orjson.loads(line) for line in results.read_text().splitlines()]
    assert [(r["tool"], r["params"].get("in_flight")) for r in lines] == [
        ("writes", None), ("peer", 256), ("peer", 1)]
    assert all(r["phases"]["adds"]["ops"] > 0 for r in lines[1:])
    cells = row(captured.out, ratios.ROWS[0].measure)
    assert cells[2].startswith("Redis XADD, AOF `appendfsync always`, 16 clients x 16 pipelined: ")
    assert float(cells[3]) > 0
    assert captured.out in readme.read_text()
    # each run's bookie data is gone once it ran: the next run's disk is not busy with it
    assert sorted(os.listdir(tmp_path / "data")) == []


def test_an_unknown_peer_is_one_clear_line(capsys):
    assert main(["bench", "report", "--peers", "redis,etcd"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bookie bench: --peers: unknown peer 'etcd' (redis, zookeeper or none)"]


def spark(sink: dict) -> dict:
    return {"tool": "spark", "raw_read": {"rate": 100_000}, "spark_count": {"rate_warm": 90_000},
            "spark_sink": sink}


def test_the_spark_row_takes_the_sinks_warm_rate_as_the_count_row_does():
    w = writes(3, 10000, 100_000, 1.0, 4.0)
    w["params"]["ensemble"], w["params"]["quorum"], w["params"]["ack_quorum"] = 3, 2, 2
    table = ratios.render([w, spark({"rate_cold": 20_000, "rate_warm": 60_000, "rate": 60_000})])
    cells = row(table, ratios.ROWS[5].measure)
    assert cells[1] == "90.0k/s / 60.0k/s warm (20.0k/s cold)"
    assert cells[5] == "met"  # 0.9 of raw reads; 0.6 of bench writes
    # a results file from before the warm runs: its one (cold) rate
    old = row(ratios.render([w, spark({"rate": 20_000})]), ratios.ROWS[5].measure)
    assert old[1] == "90.0k/s / 20.0k/s" and old[5] == "missed: sink / writes 60% short"
