"""CI runs the README's development commands word for word (.ci/run), and the project states
one licence, Apache-2.0, in LICENSE, pyproject.toml and the Debian copyright file."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_dev_commands() -> list[str]:
    """The command lines (comments dropped) of the README's "For development" sh block."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index("**For development**"):]
    block = re.search(r"```sh\n(.*?)```", after, re.S).group(1)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_ci_runs_the_readme_commands_word_for_word():
    commands = readme_dev_commands()
    assert commands == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "python -m pip install -e '.[test]' && python -m bookie localbookie 3",
        "bash tests/run.sh",
    ]
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()
          if not ln.lstrip().startswith("#")]
    for cmd in commands:
        assert any(ln.startswith(cmd) for ln in ci), f".ci/run does not run {cmd!r}"


def test_ci_script_is_valid_bash_and_starts_from_a_fresh_clone_and_venv():
    subprocess.run(["bash", "-n", str(ROOT / ".ci/run")], check=True)
    ci = (ROOT / ".ci/run").read_text()
    assert "git clone" in ci and "mktemp -d" in ci
    assert "kill -INT" in ci  # localbookie is stopped as Ctrl-C stops it


def test_the_licence_is_apache_2_everywhere():
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    copyright_ = (ROOT / "systemd/debian/copyright").read_text()
    files_star = copyright_.split("\n\n")[1]  # DEP-5: the header paragraph, then Files: *
    assert files_star.startswith("Files: *\n")
    assert "\nLicense: Apache-2.0\n" in files_star
    assert "reserved" not in copyright_
