"""The package's prerm stops a bookie an operator started by hand (no systemd), found through
its directory lock, before the program files go: run here, the real script against a real
bookie (the whole package round, remove and purge included: test_deb_package.py, -m package)."""

import os
import subprocess
import time

from bookie.testing import LocalBookies

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRERM = os.path.join(REPO, "systemd", "debian", "prerm")


def prerm(conf: str, action: str = "remove") -> subprocess.CompletedProcess:
    return subprocess.run(["sh", PRERM, action], env={**os.environ, "BOOKIE_CONF": conf},
                          capture_output=True, text=True, timeout=120)


def test_prerm_stops_a_hand_started_bookie_through_its_directory_lock(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        conf = tmp_path / "bookie.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in ens.overrides(0).items()))
        proc = ens.procs[0]
        t0 = time.monotonic()
        r = prerm(str(conf))
        assert r.returncode == 0, r.stderr
        assert f"stopping the bookie (pid {proc.pid})" in r.stderr
        assert proc.wait(60) == 0  # SIGTERM: a clean stop
        assert "bookie stopped" in ens.log(0)
        print(f"prerm stopped the bookie in {time.monotonic() - t0:.1f} s")
        # nothing runs now: prerm has nothing to do and says nothing
        again = prerm(str(conf), "upgrade")
        assert again.returncode == 0 and again.stderr == ""
