"""The compiled modules (compiled.py, setup.py) run both ways: their unit tests run here as
installed (compiled where it was built), and once more in a subprocess with BOOKIE_PURE=1,
which must load every one of them from its ``.py`` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bookie import compiled

HERE = os.path.dirname(os.path.abspath(__file__))
# The unit tests of the compiled modules (wire, client.digest, client.protocol.pending,
# storage.records, storage.ring)
UNIT_TESTS = ["test_wire.py", "test_client_digest.py", "test_client_encode_runs.py",
              "test_protocol_pending.py", "test_pending_runs.py", "test_ring.py",
              "test_entry_log_index.py"]


def _loaded_from(env_extra: dict) -> dict:
    code = ("import json, importlib; from bookie import compiled; "
            "print(json.dumps({n: importlib.import_module('bookie.' + n).__file__ "
            "for n in compiled.COMPILED} | {'describe': compiled.describe()}))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env_extra},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_bookie_pure_loads_every_compiled_module_from_its_source():
    files = _loaded_from({compiled.PURE_ENV: "1"})
    assert files.pop("describe") == f"pure Python ({compiled.PURE_ENV}=1)"
    assert set(files) == set(compiled.COMPILED)
    for name, path in files.items():
        assert path == compiled.source_path(name)


def test_describe_names_the_modules_that_run_compiled():
    files = _loaded_from({compiled.PURE_ENV: ""})
    said = files.pop("describe")
    built = [n for n in compiled.COMPILED if not files[n].endswith(".py")]
    assert said == ("compiled: " + ", ".join(built) if built else "pure Python")


@pytest.mark.timeout(1200)  # a second run of several test files, in one process
def test_the_compiled_modules_unit_tests_pass_with_the_plain_modules_too():
    # tests/setup.sh installs a C compiler and Python's headers and installs the package again:
    # an install that compiled nothing is a missing set-up step, not a case to skip
    assert compiled.compiled_modules(), (
        "nothing is compiled in this install: run tests/setup.sh (a C compiler, Python's "
        "headers, then pip install -e '.[test]' builds them)")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:xdist",
         *[os.path.join(HERE, t) for t in UNIT_TESTS]],
        env={**os.environ, compiled.PURE_ENV: "1"}, capture_output=True, text=True,
        timeout=1100, cwd=os.path.dirname(os.path.dirname(HERE)))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_a_source_edited_after_the_build_runs_plain_not_its_stale_extension(tmp_path,
                                                                            monkeypatch):
    """An edited checkout (or a ``git pull``) must run the code its ``.py`` holds: Python would
    import the older extension beside it first.  The stale module is named, the others are not."""
    import importlib.machinery
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "wire.py").write_text("X = 1\n")
    (tmp_path / ("wire" + suffix)).write_bytes(b"")
    (tmp_path / "ring.py").write_text("X = 1\n")
    (tmp_path / ("ring" + suffix)).write_bytes(b"")
    monkeypatch.setattr(compiled, "COMPILED", ("wire", "ring"))
    monkeypatch.setattr(compiled, "source_path", lambda n: str(tmp_path / f"{n}.py"))
    built = os.stat(tmp_path / ("wire" + suffix)).st_mtime
    os.utime(tmp_path / "ring.py", (built + 1, built + 1))  # within one build: not stale
    os.utime(tmp_path / "wire.py", (built + 60, built + 60))  # edited a minute later
    assert compiled.stale_modules() == ["wire"]
