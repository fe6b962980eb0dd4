"""bench report: the standard runs parse as commands, results become the README's table."""

import orjson
import pytest

from bookie.appliance.cli import build_parser, main
from bookie.bench import standard
from bookie.bench.report import Meter, build_result

S = 1_000_000_000


def phase(ops_per_s: float, p99_ms: float, **extra) -> dict:
    m = Meter("x", emit=None)
    m.start(0)
    m.record(int(p99_ms * 1_000_000), int(ops_per_s), int(ops_per_s) * 1024)
    fig = m.finish(S)
    fig.update(extra)
    return fig


def writes_result(ensemble, rate, ops_per_s, p99_ms, throttle=10000):
    return build_result("writes", {"ensemble": ensemble, "rate": rate, "time": 1.0,
                                   "throttle": throttle},
                        {"writes": phase(ops_per_s, p99_ms)})


def test_every_standard_run_is_a_valid_command():
    parser = build_parser()
    for run in standard.STANDARD:
        rate = ["--rate", "1000"] if run.rate_of else []  # run_all adds it from the earlier run
        args = parser.parse_args(["bench", run.tool, *run.argv, "--time", "1", "--dir", "/tmp"]
                                 if run.tool == "journal" else
                                 ["bench", run.tool, *run.argv, *rate, "--time", "1"])
        params = vars(args)
        assert all(params.get(k) == v for k, v in run.match.items()), run.name


def test_verdicts_say_how_far_off_a_target_is():
    at_least = standard.Figure("adds/s", lambda r: 0, 100_000, True, "/s")
    under = standard.Figure("p99", lambda r: 0, 10.0, False, "ms")
    assert standard.verdict(at_least, 120_000) == "met"
    assert standard.verdict(at_least, 60_000) == "missed: 40% short"
    assert standard.verdict(under, 9.9) == "met"
    assert standard.verdict(under, 15.0) == "missed: 50% over"


def test_table_takes_the_latest_matching_result_and_names_missing_runs():
    results = [writes_result(1, None, 10_000, 5.0), writes_result(1, None, 123_456, 7.5),
               writes_result(3, 20000.0, 19_900, 25.0)]
    table = standard.render(results)
    assert "| client, 1 bookie, E=Qw=Qa=1 | adds/s | 123,456/s | >= 100,000/s | met |" in table
    assert "| | p99 | 7.50 ms | | | |" in table
    assert "| client, 3 bookies, E=3 Qw=2 Qa=2, --rate 20000 | adds/s | 19,900/s |" in table
    assert "| | p99 | 25.00 ms | < 20.00 ms | missed: 25% over | |" in table
    assert "| journal alone vs raw fdatasync | | not run | | | |" in table
    assert table.startswith("Measured ") and "Python" in table


def test_256_in_flight_rows_take_only_their_own_results():
    table = standard.render([writes_result(1, None, 150_000, 4.0, throttle=256),
                             writes_result(1, None, 160_000, 30.0)])
    assert "| client, 1 bookie, E=Qw=Qa=1, 256 in flight | adds/s | 150,000/s | >= 130,000/s | met |" in table
    assert "| client, 1 bookie, E=Qw=Qa=1 | adds/s | 160,000/s |" in table


def test_lone_add_is_judged_against_the_disk_beside_it():
    result = build_result("bookie", {"rate": None, "time": 1.0},
                          {"disk": phase(4000, 0.3), "sync": phase(1000, 0.6),
                           "pipelined": phase(150_000, 4.0)})
    table = standard.render([result])
    assert "| | lone add p50 / disk p50 | 2.00 | < 3.00 | met | |" in table


def test_table_goes_between_the_readme_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{standard.BEGIN}\nold table\n{standard.END}\nafter\n")
    standard.replace_in_readme(str(readme), "| new |\n")
    assert readme.read_text() == f"intro\n{standard.BEGIN}\n| new |\n{standard.END}\nafter\n"
    (tmp_path / "plain.md").write_text("no markers")
    with pytest.raises(ValueError, match="markers"):
        standard.replace_in_readme(str(tmp_path / "plain.md"), "x")


def test_report_from_a_results_file(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps(writes_result(3, None, 45_000, 12.0)) + b"\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"{standard.BEGIN}\n{standard.END}\n")
    rc = main(["bench", "report", "--results", str(results), "--from-results",
               "--readme", str(readme)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| client, 3 bookies, E=3 Qw=2 Qa=2 | adds/s | 45,000/s | >= 40,000/s | met |" in out
    assert out in readme.read_text()


def test_report_refuses_to_tabulate_nothing(capsys):
    assert main(["bench", "report", "--from-results"]) == 2
    assert "--from-results needs --results FILE" in capsys.readouterr().err


def reads_result(ensemble, quorum, ops_per_s, listen=None, rate=None, **phases):
    return build_result("reads", {"ensemble": ensemble, "quorum": quorum, "listen": listen,
                                  "rate": rate, "time": 1.0},
                        {"sequential": phase(ops_per_s, 3.0), **phases})


def test_every_target_of_the_issue_has_a_row():
    labels = {(run.name, fig.label) for run in standard.STANDARD for fig in run.figures}
    judged = {(run.name, fig.label): fig.target for run in standard.STANDARD
              for fig in run.figures if fig.target is not None}
    assert judged[(standard.RAW, "lone add p50 / disk p50")] == 3.0
    assert judged[(standard.RAW, "lone add p99")] == 1.5
    assert ("client, 1 bookie, E=Qw=Qa=1, one add at a time", "p50 / disk p50") in labels
    assert judged[("client, 1 bookie, E=Qw=Qa=1, 256 in flight", "adds/s")] == 130_000
    assert judged[("client, 3 bookies, E=3 Qw=2 Qa=2, 256 in flight", "p99")] == 10.0
    e3 = "reads of a closed ledger, 3 bookies, E=3 Qw=2 (striped READ)"
    assert judged[(e3, "that / E=1 entries/s")] == 0.9
    assert judged[(e3, "that / healthy")] == 0.5
    assert judged[(standard.TAIL_FULL, "tail lag p99")] == 50.0
    assert judged[("tailing reads, writer at half the full-speed rate, 1 bookie", "tail lag p99")] == 20.0


def test_figures_beside_another_run_take_its_latest_result():
    qd1 = writes_result(1, None, 900, 1.2, throttle=1)
    qd1["phases"]["writes"]["latency_ms"]["p50"] = 0.9
    raw = build_result("bookie", {"rate": None, "time": 1.0},
                       {"disk": phase(4000, 0.3), "sync": phase(1000, 0.6),
                        "pipelined": phase(150_000, 4.0)})
    raw["phases"]["disk"]["latency_ms"]["p50"] = 0.3
    e1, e3 = reads_result(1, 1, 200_000), reads_result(3, 2, 190_000)
    table = standard.render([qd1, e1, e3])
    assert '| | p50 / disk p50 | no result of "one bookie, raw wire (BenchBookie)" | | | |' in table
    assert "| | that / E=1 entries/s | 0.95 | >= 0.90 | met | |" in table
    table = standard.render([qd1, raw, e1, e3])
    assert "| | p50 / disk p50 | 3.00 | | | |" in table


def test_half_rate_tailing_takes_only_paced_results():
    def tailing(rate, p99):
        tail = phase(40_000, 5.0, lag_ms={"p50": 2.0, "p99": p99})
        return reads_result(1, 1, 1, listen=1, rate=rate, writer=phase(40_000, 5.0), tail=tail)
    full, half = tailing(None, 30.0), tailing(20_000.0, 15.0)
    table = standard.render([full, half])
    assert "| | tail lag p99 | 30.00 ms | < 50.00 ms | met | |" in table
    assert "| | tail lag p99 | 15.00 ms | < 20.00 ms | met | |" in table
