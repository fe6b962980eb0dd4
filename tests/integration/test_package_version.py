"""One version, in one place (pyproject.toml), and Debian package versions that every later
build sorts above: a rebuild of the same version installs as an upgrade."""

import os
import re
import subprocess
import sys
import time

import bookie

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def project_version() -> str:
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        return re.search(r'^version *= *"([^"]+)"', f.read(), re.M).group(1)


def deb_version(**env) -> str:
    return subprocess.run(["bash", os.path.join(REPO, "systemd", "deb-version.sh")],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def test_the_program_reports_the_projects_one_version():
    assert bookie.__version__ == project_version()
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "python"), "-m",
                          "bookie", "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"bookie {project_version()}"
    with open(os.path.join(REPO, "__init__.py")) as f:
        assert not re.search(r'__version__ = "\d', f.read()), "a second copy of the version"


def test_each_build_sorts_above_the_one_before():
    first = deb_version()
    time.sleep(1.1)
    second = deb_version()
    for v in (first, second):
        assert v.startswith(project_version() + "+b"), v
    assert subprocess.run(["dpkg", "--compare-versions", second, "gt", first]).returncode == 0
    # and above a package of the bare version, as built before the suffix existed
    assert subprocess.run(["dpkg", "--compare-versions", first, "gt",
                           project_version()]).returncode == 0
    assert deb_version(BOOKIE_BUILD_SUFFIX="42") == f"{project_version()}+b42"
