"""Chosen ports are reserved across processes (workers/ports.py): two test processes that start
bookie ensembles at once (pytest-xdist) never hand out the same pair.

Real processes, real lock files, real binds; only the random choice is steered, so that the
processes are made to want the same ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from bookie.workers import ports

STEER = """
import random, sys
from bookie.workers import ports
wanted = [int(p) for p in sys.argv[1].split(",")]
random.SystemRandom.randrange = lambda self, lo, hi: random.choice(wanted)
"""


def _run(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STEER + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def steer(monkeypatch):
    def to(*wanted: int) -> None:
        monkeypatch.setattr(ports.random.SystemRandom, "randrange",
                            lambda self, lo, hi: ports.random.choice(wanted))
    return to


def _free_pairs(n: int) -> list[int]:
    found = []
    for _ in range(n):
        r = ports.reserve_port_pair("127.0.0.1")
        found.append(r)
    for r in found:
        r.release()
    return [r.port for r in found]


def test_a_pair_reserved_here_is_not_chosen_by_another_process_or_by_this_one(steer):
    mine, other = _free_pairs(2)
    held = ports.reserve_port_pair("127.0.0.1")
    try:
        # both processes want the held pair first; both must pass it by
        steer(held.port)
        with pytest.raises(RuntimeError, match="no free pair"):
            ports.reserve_port_pair("127.0.0.1")
        result = _run("print(ports.free_port_pair('127.0.0.1'))", f"{held.port},{other}")
        assert result.returncode == 0, result.stderr
        assert int(result.stdout) == other
    finally:
        held.release()
    steer(held.port)
    again = ports.reserve_port_pair("127.0.0.1")  # released: anyone may have it again
    assert again.port == held.port
    again.release()
    assert mine != other


def test_a_dead_holders_pair_is_free_again_and_a_bound_pair_never_is(steer):
    pair, = _free_pairs(1)
    holder = subprocess.Popen(
        [sys.executable, "-c", STEER + "r = ports.reserve_port_pair('127.0.0.1'); "
         "print(r.port, flush=True); sys.stdin.read()", str(pair)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert int(holder.stdout.readline()) == pair
        steer(pair)
        with pytest.raises(RuntimeError):
            ports.reserve_port_pair("127.0.0.1")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert ports.reserve_port_pair("127.0.0.1").port == pair  # its lock died with it
    # a pair some process has bound is not chosen, reserved or not
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", pair + 1))
        with pytest.raises(RuntimeError):
            ports.reserve_port_pair("127.0.0.1")


def test_processes_racing_for_few_pairs_never_hold_one_pair_at_once(tmp_path):
    # Four processes reserve and release over and over from three pairs.  While it holds a
    # pair, each claims a marker file for it with O_EXCL: a second holder of that pair at the
    # same moment would find the marker there.  Releases unlink the lock files, so the race
    # between one holder's unlink and another's lock is run many times too.
    wanted = ",".join(str(p) for p in _free_pairs(3))
    code = f"""
        import os, time
        clash = 0
        got = 0
        for _ in range(300):
            try:
                r = ports.reserve_port_pair('127.0.0.1')
            except RuntimeError:
                continue
            got += 1
            marker = os.path.join({str(tmp_path)!r}, str(r.port))
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                clash += 1
            else:
                os.close(fd)
                time.sleep(0.0005)
                os.unlink(marker)
            r.release()
        print(got, clash)
    """
    procs = [subprocess.Popen([sys.executable, "-c", STEER + textwrap.dedent(code), wanted],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(tuple(int(x) for x in out.split()))
    assert all(clash == 0 for _, clash in results), results
    assert sum(got for got, _ in results) > 300, results  # they did hold pairs, many times
    assert os.listdir(tmp_path) == []
