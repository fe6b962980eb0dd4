"""Progress lines, figures, the JSON line and the plot of the benchmark tools (no I/O but files)."""

import io
import sys

import orjson
import pytest

from bookie.bench import report
from bookie.bench.plot import INSTALL_HINT, PlotUnavailable, plot_result, require_matplotlib
from bookie.bench.report import NS_PER_MS, NS_PER_S, Meter

S = NS_PER_S
MS = NS_PER_MS


def run_meter(lines):
    """Three seconds of a made-up phase on a fake clock."""
    m = Meter("test", unit="adds", emit=lines.append)
    m.start(0)
    for second in range(3):
        t0 = second * S
        for i in range(100):  # 100 adds a second, 1 KB each, 1..100 ms
            m.record((i + 1) * MS, 1, 1000)
            m.tick(t0 + (i + 1) * S // 100 - 1, outstanding=7)
        m.tick(t0 + S, outstanding=7)
    return m, m.finish(3 * S + S // 100)


def test_meter_counts_and_rates():
    lines = []
    _, fig = run_meter(lines)
    assert fig["ops"] == 300 and fig["bytes"] == 300_000 and fig["errors"] == 0
    assert fig["duration_s"] == pytest.approx(3.01)
    assert fig["ops_per_s"] == pytest.approx(300 / 3.01)
    assert fig["mb_per_s"] == pytest.approx(0.3 / 3.01)
    lat = fig["latency_ms"]
    assert lat["count"] == 300 and lat["max"] == 100.0
    assert lat["p50"] == pytest.approx(50, rel=1e-3) and lat["p99"] == pytest.approx(99, rel=1e-3)
    assert lat["mean"] == pytest.approx(50.5)


def test_one_progress_line_and_timeline_point_per_interval():
    lines = []
    _, fig = run_meter(lines)
    # three full seconds; the last 10 ms sliver counts in the totals but makes no point
    assert len(lines) == 3 and len(fig["timeline"]) == 3
    point = fig["timeline"][1]
    assert point["t_s"] == 2.0 and point["ops_per_s"] == pytest.approx(100)
    assert point["mb_per_s"] == pytest.approx(0.1) and point["outstanding"] == 7
    assert point["p99_ms"] == pytest.approx(99, rel=1e-3) and point["max_ms"] == 100.0
    assert lines[1].startswith("[test]") and "100 adds/s" in lines[1]
    assert "outstanding 7" in lines[1] and "p99" in lines[1]


def test_a_long_last_interval_gets_its_point():
    m = Meter("x", emit=None)
    m.start(0)
    m.record(MS, 10)
    fig = m.finish(S // 2)
    assert len(fig["timeline"]) == 1 and fig["timeline"][0]["ops_per_s"] == pytest.approx(20)


def test_quiet_meter_prints_nothing_and_still_keeps_the_timeline():
    m = Meter("x", emit=None)
    m.start(0)
    m.record(MS)
    assert m.tick(S)
    assert not m.tick(S + 1)
    assert len(m.finish(S + S // 2)["timeline"]) == 2


def test_corrected_recording_counts_ops_once_and_samples_many():
    m = Meter("sync", emit=None)
    m.start(0)
    m.record_corrected(10 * MS, 1 * MS, 1, 100)
    fig = m.finish(S)
    assert fig["ops"] == 1 and fig["latency_ms"]["count"] == 10


def test_result_json_line_and_results_file(tmp_path):
    m = Meter("only", emit=None)
    m.start(0)
    m.record(2 * MS, 5, 5000)
    result = report.build_result("bookie", {"time": 1.0}, {"only": m.finish(S)},
                                 data_dir=str(tmp_path), figures={"ratio": 0.5})
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "results.jsonl"
    report.emit(result, json_out=str(path), out=out, err=err)
    report.emit(result, json_out=str(path), out=io.StringIO(), err=io.StringIO())
    line = out.getvalue()
    assert line.count("\n") == 1
    parsed = orjson.loads(line)
    assert parsed["phases"]["only"]["ops"] == 5 and parsed["figures"]["ratio"] == 0.5
    assert parsed["host"]["disk"]["path"] == str(tmp_path)
    assert parsed["host"]["disk"]["total_bytes"] > 0
    assert len(report.load_results(str(path))) == 2
    summary = err.getvalue()
    assert "only: 5 adds" in summary and "p99.9" in summary and "ratio: 0.500" in summary


def test_load_results_names_a_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"tool": "x"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        report.load_results(str(path))


def test_host_info_has_the_machine():
    host = report.host_info(None)
    assert host["cores"] >= 1 and host["memory_bytes"] > 0 and len(host["load_avg"]) == 3
    assert host["disk"] is None
    assert set(host["versions"]) >= {"bookie", "python", "pyzmq", "libzmq", "numpy", "lmdb"}


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    with pytest.raises(PlotUnavailable) as e:
        require_matplotlib()
    assert str(e.value) == INSTALL_HINT and "pip install" in INSTALL_HINT


def test_plot_draws_a_png_when_matplotlib_is_there(tmp_path):
    m = Meter("only", emit=None)
    m.start(0)
    for t in range(1, 4):
        m.record(t * MS, 100, 100_000)
        m.tick(t * S)
    result = report.build_result("bookie", {}, {"only": m.finish(3 * S)})
    path = tmp_path / "run.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(PlotUnavailable):
            plot_result(result, str(path))
        return
    plot_result(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_late_tick_does_not_leave_a_sliver_of_an_interval():
    m = Meter("x", emit=None)
    m.start(0)
    m.tick(S)
    m.tick(2 * S + 9 * S // 10)  # 0.9 s late: the next beat (3 s) is too close, so 4 s
    assert not m.tick(3 * S + S // 10)
    assert m.tick(4 * S)
    assert [p["t_s"] for p in m.timeline] == [1.0, 2.9, 4.0]
