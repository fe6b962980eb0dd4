"""``bookie bench report --plots``: the points of the pictures, from a results file and from
bench/README.md's tables (the figures it shows, nothing estimated), and the PNGs drawn; the
README shows the pictures it links, and they are in the repository."""

from __future__ import annotations

import os
import subprocess
import sys

from bookie.bench.in_flight import (LATENCY_PNG, REDIS, THROUGHPUT_PNG, ZOOKEEPER, Point,
                                    plot_in_flight, points_from_readme, points_from_results)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "bench", "README.md")
PNG = b"\x89PNG\r\n\x1a\n"


def test_points_from_the_readme_tables_are_the_figures_they_show():
    with open(README, encoding="utf-8") as f:
        points = {(p.series, p.in_flight): p for p in points_from_readme(f.read())}
    one = "bookie, 1 bookie E=Qw=Qa=1"
    assert {n for s, n in points if s == one} == {1, 256, 10000}
    assert points[(one, 1)].ops_per_s is None  # not in the table: left out, not estimated
    assert points[(one, 1)].p50_ms and points[(one, 1)].p99_ms
    assert points[(one, 256)].ops_per_s and points[(one, 256)].p99_ms
    assert points[(REDIS, 256)].ops_per_s and points[(REDIS, 1)].p50_ms
    assert points[(ZOOKEEPER, 256)].ops_per_s


def test_points_from_a_results_file_take_each_runs_last_figures():
    def writes(throttle, ops, p99, ensemble=1):
        return {"tool": "writes", "params": {"ensemble": ensemble, "write_quorum": ensemble,
                                             "ack_quorum": ensemble, "throttle": throttle,
                                             "rate": None},
                "phases": {"writes": {"ops_per_s": ops, "latency_ms": {"p50": 1.0, "p99": p99}}}}
    results = [writes(256, 1000.0, 9.0), writes(256, 2000.0, 8.0), writes(1, 900.0, 2.0),
               {"tool": "writes", "params": {"ensemble": 1, "throttle": 256, "rate": 5000},
                "phases": {"writes": {"ops_per_s": 5000.0, "latency_ms": {}}}},
               {"tool": "peer", "params": {"system": "redis", "in_flight": 256},
                "phases": {"adds": {"ops_per_s": 3000.0, "latency_ms": {"p99": 5.0}}}},
               {"tool": "peer", "params": {"system": "zookeeper"}, "error": "not installed"}]
    assert points_from_results(results) == [
        Point(REDIS, 256, 3000.0, None, 5.0),
        Point("bookie, 1 bookie E=Qw=Qa=1", 1, 900.0, 1.0, 2.0),
        Point("bookie, 1 bookie E=Qw=Qa=1", 256, 2000.0, 1.0, 8.0)]


def test_the_pictures_are_drawn_and_the_readme_shows_the_ones_in_the_repository(tmp_path):
    paths = plot_in_flight([Point("bookie, 1 bookie E=Qw=Qa=1", 1, None, 0.8, 2.0),
                            Point("bookie, 1 bookie E=Qw=Qa=1", 256, 9e4, None, 9.0),
                            Point(REDIS, 256, 1.2e5, None, 5.7)], str(tmp_path))
    assert [os.path.basename(p) for p in paths] == [THROUGHPUT_PNG, LATENCY_PNG]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == PNG
    with open(README, encoding="utf-8") as f:
        text = f.read()
    for name in (THROUGHPUT_PNG, LATENCY_PNG):
        assert f"]({name})" in text
        with open(os.path.join(ROOT, "bench", name), "rb") as f:
            assert f.read(8) == PNG


def test_bench_report_from_readme_writes_the_pictures(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bookie", "bench", "report", "--plots",
                           str(tmp_path), "--from-readme", README], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == sorted([THROUGHPUT_PNG, LATENCY_PNG])
    bad = subprocess.run([sys.executable, "-m", "bookie", "bench", "report", "--from-readme",
                          README], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--plots" in bad.stderr, bad.stderr


def test_points_further_apart_than_a_decade_are_not_joined():
    from bookie.bench.in_flight import joined_runs
    # the README's sweep: 1, 256, 10,000 in flight (2.4 and 1.6 decades apart): points only
    assert joined_runs([(1, 5.0), (256, 9.0), (10000, 30.0)]) == [
        [(1, 5.0)], [(256, 9.0)], [(10000, 30.0)]]
    # a dense sweep keeps its line
    assert joined_runs([(1, 1.0), (4, 2.0), (16, 3.0), (1000, 4.0)]) == [
        [(1, 1.0), (4, 2.0), (16, 3.0)], [(1000, 4.0)]]
