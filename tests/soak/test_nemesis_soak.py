"""The fault-injection harness for as long as asked (opt-in: ``-m soak``).

    BOOKIE_SOAK_SECONDS=600 python -m pytest -m soak tests/soak/test_nemesis_soak.py

runs each configuration below for BOOKIE_SOAK_SECONDS (default 600) with a seed taken from
BOOKIE_NEMESIS_SEED or drawn at random (printed with the command that replays it), with the
lifecycle faults on (``--lifecycle``; BOOKIE_SOAK_LIFECYCLE=0 turns them off).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

SOAK_S = float(os.environ.get("BOOKIE_SOAK_SECONDS", "600"))
LIFECYCLE = ["--lifecycle"] if os.environ.get("BOOKIE_SOAK_LIFECYCLE", "1") != "0" else []

# The suite's default per-test timeout is far shorter than a soak.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(SOAK_S * 2 + 900)]


def soak(*args: str) -> None:
    seed = os.environ.get("BOOKIE_NEMESIS_SEED") or str(random.randrange(1 << 31))
    cmd = [sys.executable, "-m", "bookie.testing.nemesis", "--seed", seed, "--time",
           str(SOAK_S), *LIFECYCLE, *args]
    print("soak:", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=SOAK_S * 2 + 600)
    out = done.stdout + done.stderr
    print(out[-6000:])
    assert done.returncode == 0, f"exit {done.returncode}:\n{out[-12000:]}"
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["lost"] == 0 and figures["violations"] == 0 and \
        figures["reader_violations"] == 0, figures


def test_soak_embedded_store_with_process_and_disk_faults():
    soak("--bookies", "5", "--metadata", "lmdb", "--disk")


def test_soak_zookeeper_with_network_faults():
    assert os.geteuid() == 0 and shutil.which("nft"), "needs root and nft: run tests/setup.sh as root"
    soak("--bookies", "5", "--metadata", "zk", "--network", "--disk")
