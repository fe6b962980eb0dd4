"""CPU per operation per process role (bench/cpu.py): the arithmetic on given snapshots, the roles
read from real process titles, and the figure in a real run's JSON line and in the report's table."""

import os
import subprocess
import sys
import time

import orjson

from bookie.appliance.cli import main
from bookie.bench import cpu, standard
from bookie.bench.report import Meter, build_result


def test_per_op_sums_roles_over_processes_and_counts_new_ones_from_zero():
    before = {1: ("client", 1.0), 2: ("add", 2.0), 3: ("add", 5.0), 4: ("journal", 1.0),
              9: ("read", 3.0)}  # 9 is gone by the end: not counted
    after = {1: ("client", 1.5), 2: ("add", 2.25), 3: ("add", 5.25), 4: ("journal", 1.1),
             5: ("other", 0.2)}  # 5 started during the phase
    us = cpu.per_op_us(before, after, 1000)
    assert us["client"] == 500.0 and us["add"] == 500.0 and us["other"] == 200.0
    assert abs(us["journal"] - 100.0) < 1e-6
    assert abs(us["total"] - 1300.0) < 1e-6 and "read" not in us


def test_per_op_without_operations_is_zero_not_a_division_error():
    assert cpu.per_op_us({1: ("client", 1.0)}, {1: ("client", 2.0)}, 0) == {"total": 0.0,
                                                                            "client": 0.0}


def test_roles_come_from_worker_titles():
    assert cpu.role_of("bookie[3181] journal") == "journal"
    assert cpu.role_of("bookie[3181] journal-1") == "journal"
    assert cpu.role_of("bookie[40123] add") == "add"
    assert cpu.role_of("/usr/bin/python3 -m bookie run --set bookiePort=3181") == "supervisor"
    assert cpu.role_of("/usr/bin/python3 -c from multiprocessing.spawn import spawn_main") == "other"


def test_snapshot_sees_this_process_and_a_busy_child():
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\nimport sys\n"
                              "sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        before = cpu.snapshot()
        assert before[os.getpid()][0] == "client"
        for _ in range(200):
            after = cpu.snapshot()
            if after.get(child.pid, ("", 0.0))[1] >= 0.3:
                break
            time.sleep(0.02)
        assert after[child.pid][0] == "other"
        assert cpu.per_op_us({}, after, 1)["other"] >= 0.3e6
    finally:
        child.communicate(b"")


def test_every_phase_and_the_result_carry_the_figure():
    m = Meter("writes", emit=None)
    m.start(0)
    m.record(1000, 10)
    phase = m.finish(10**9)
    assert set(phase["cpu_us_per_op"]) >= {"total", "client"}
    result = build_result("writes", {}, {"warm": {"ops": 0}, "writes": phase})
    assert result["cpu_us_per_op"] == phase["cpu_us_per_op"]
    assert build_result("peer", {}, {})["cpu_us_per_op"] == {}


def test_report_table_shows_total_and_roles():
    result = {"cpu_us_per_op": {"total": 12.34, "add": 5.0, "client": 4.0, "journal": 3.3,
                                "read": 0.04}}
    assert standard.cpu_cell(result) == "12.3 (add 5.0, client 4.0, journal 3.3)"
    assert standard.cpu_cell({}) == ""  # a result from before the figure


def test_a_local_run_measures_every_worker_role(capsys, tmp_path):
    rc = main(["bench", "writes", "--localbookie", "1", "--data-dir", str(tmp_path),
               "--ensemble", "1", "--quorum", "1", "--time", "1", "--throttle", "256",
               "--warmup-messages", "100", "--quiet"])
    result = orjson.loads(capsys.readouterr().out.splitlines()[0])
    assert rc == 0 and result["phases"]["writes"]["ops"] > 0
    figure = result["cpu_us_per_op"]
    assert figure == result["phases"]["writes"]["cpu_us_per_op"]
    assert {"total", "client", "add", "journal", "read", "supervisor"} <= set(figure)
    # the client and the add worker do work for every add; the total is their sum with the rest
    assert figure["client"] > 0 and figure["add"] > 0 and figure["journal"] > 0
    assert abs(figure["total"] - sum(v for k, v in figure.items() if k != "total")) < 1e-6
