"""The package's prerm warns before it stops a bookie that holds the last live copy of a ledger
(``bookie shell whatif --conf``), and the warning never fails nor blocks the upgrade: prerm
exits 0 and waits for the check at most BOOKIE_WHATIF_S (issue 35).  The script runs here
without building the package; BOOKIE_BIN names this checkout's ``bookie``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PRERM = os.path.join(REPO, "systemd", "debian", "prerm")


def _prerm(tmp_path, conf: str, bookie_bin: str, whatif_s: int = 60):
    env = {**os.environ, "BOOKIE_CONF": conf, "BOOKIE_BIN": bookie_bin,
           "BOOKIE_WHATIF_S": str(whatif_s), "BOOKIE_STOP_WAIT_S": "5"}
    start = time.monotonic()
    r = subprocess.run(["sh", PRERM, "upgrade"], capture_output=True, text=True, timeout=180,
                       env=env)
    return r, time.monotonic() - start


def _bin(tmp_path, body: str) -> str:
    path = tmp_path / "bookie"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_prerm_warns_before_stopping_the_last_copy_and_goes_on(tmp_path):
    with LocalBookies(2, base_dir=str(tmp_path / "e")) as ens:
        with BookKeeper(ens.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"p")
            lh.add_entry(b"only copy")
            lh.close()
        with open_metadata(ens.metadata_uri) as store:
            holder = store.read_ledger(lh.ledger_id)[0].fragments[0][1][0]
        conf = str(tmp_path / "bookie.conf")
        with open(conf, "w") as f:  # the holder's own configuration, as /etc/bookie/bookie.conf
            f.writelines(f"{k}={v}\n" for k, v in ens.overrides(ens.bookies.index(holder)).items())
        real = _bin(tmp_path, f'exec "{sys.executable}" -m bookie "$@"')
        r, _ = _prerm(tmp_path, conf, real)
        assert r.returncode == 0, r.stderr
        assert "while this bookie is stopped for the upgrade" in r.stderr, r.stderr
        # each ledger once, under the worst that happens to it (not three times: issue 44)
        assert re.search(rf"1 ledger\(s\) would lose their last live copy: {lh.ledger_id}$",
                         r.stderr, re.M), r.stderr
        assert "unreadable" not in r.stderr and "ack quorum" not in r.stderr, r.stderr


def test_a_check_that_hangs_never_holds_the_upgrade(tmp_path):
    conf = tmp_path / "bookie.conf"
    conf.write_text(f"journalDirectory={tmp_path}/j\nledgerDirectories={tmp_path}/l\n")
    hangs = _bin(tmp_path, "sleep 120")
    r, took_s = _prerm(tmp_path, str(conf), hangs, whatif_s=2)
    assert r.returncode == 0, r.stderr
    assert took_s < 120, took_s  # it went on without the hung check (which sleeps 120 s)
    assert "warning" not in r.stderr
