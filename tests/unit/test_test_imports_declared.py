"""Every third-party module a test imports comes with the package's declared requirements: a
fresh virtual environment with ``pip install -e '.[test]'`` (README, "Set up") runs every test
but the Spark ones, which the ``spark`` extra serves (tests/setup.sh installs it).

A test that imports a module no requirement brings passes on a machine that happens to have it
and fails on a newcomer's (issue 35: PyYAML). The check reads the imports with ``ast`` (at any
depth: a function-local import counts) and maps import names to distributions."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# Import name -> distribution, for the modules whose names differ from their distribution's or
# that may be absent here (the Spark extra).  A third-party import missing from this table and
# from the installed distributions' own map fails the check: add it here and to an extra.
DISTRIBUTION = {
    "yaml": "pyyaml", "zmq": "pyzmq", "pytest": "pytest", "hypothesis": "hypothesis",
    "kazoo": "kazoo", "lmdb": "lmdb", "numpy": "numpy", "orjson": "orjson",
    "prometheus_client": "prometheus-client", "crc32c": "crc32c", "setproctitle": "setproctitle",
    "matplotlib": "matplotlib", "pyspark": "pyspark", "pyarrow": "pyarrow",
    "xdist": "pytest-xdist", "pytest_timeout": "pytest-timeout", "nacl": "pynacl",
}
# Extras whose modules a test may import only if it is a Spark test (or the session fixture).
SPARK_ONLY = ("spark",)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    return _norm(re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0])


def declared(pyproject: dict) -> tuple[set[str], set[str]]:
    """(distributions every test may rely on: dependencies + the test extra,
    distributions only the Spark tests may rely on: the spark extra)."""
    project = pyproject["project"]
    extras = project.get("optional-dependencies", {})
    base = {_req_name(r) for r in project.get("dependencies", [])}
    base |= {_req_name(r) for r in extras.get("test", [])}
    spark = {_req_name(r) for e in SPARK_ONLY for r in extras.get(e, [])}
    return base, spark


def imported_modules(source: str) -> set[str]:
    """Top-level names of every absolute import in ``source``, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def local_modules(tests: Path) -> set[str]:
    """The suite's own importable names: tests/helpers (pythonpath), test modules, conftests."""
    return {p.stem for p in tests.rglob("*.py")} | {"bookie"}


def undeclared(files: dict[str, str], base: set[str], spark: set[str], local: set[str],
               dist_of: dict[str, str]) -> list[str]:
    """One line per (file, module) whose module no allowed requirement brings.

    ``files`` maps a path relative to the repository to its source; ``dist_of`` maps an import
    name to its distribution (normalised).  A file whose name says ``spark`` (and conftest.py,
    whose Spark session fixture imports pyspark) may also use the spark extra."""
    problems = []
    for path, source in sorted(files.items()):
        allowed = base | spark if ("spark" in path or path.endswith("conftest.py")) else base
        for mod in sorted(imported_modules(source)):
            if mod in sys.stdlib_module_names or mod in local or mod == "__future__":
                continue
            dist = dist_of.get(mod)
            if dist is None:
                problems.append(f"{path}: imports {mod}, which no known distribution provides "
                                f"(add it to DISTRIBUTION here and to the test extra)")
            elif dist not in allowed:
                problems.append(f"{path}: imports {mod} ({dist}), which "
                                f"`pip install -e '.[test]'` does not install")
    return problems


def _dist_map() -> dict[str, str]:
    from importlib.metadata import packages_distributions

    found = {mod: _norm(dists[0]) for mod, dists in packages_distributions().items() if dists}
    found.update({m: _norm(d) for m, d in DISTRIBUTION.items()})
    return found


def test_every_test_import_comes_with_the_test_extra():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    base, spark = declared(pyproject)
    files = {str(p.relative_to(ROOT)): p.read_text() for p in TESTS.rglob("*.py")}
    assert undeclared(files, base, spark, local_modules(TESTS), _dist_map()) == []


def test_the_check_catches_an_undeclared_import():
    base, spark = declared({"project": {
        "dependencies": ["pyzmq>=25"],
        "optional-dependencies": {"test": ["pytest>=7"], "spark": ["pyspark>=4"]}}})
    files = {
        "tests/integration/test_a.py": "import yaml\nimport zmq\nimport os\nimport helper\n",
        "tests/integration/test_b.py": "def f():\n    from pyspark.sql import SparkSession\n",
        "tests/integration/test_spark_c.py": "import pyspark\nimport pytest\n",
        "tests/unit/test_d.py": "import notapackage_at_all\n",
    }
    dist_of = {"yaml": "pyyaml", "zmq": "pyzmq", "pyspark": "pyspark", "pytest": "pytest"}
    assert undeclared(files, base, spark, {"helper"}, dist_of) == [
        "tests/integration/test_a.py: imports yaml (pyyaml), which "
        "`pip install -e '.[test]'` does not install",
        "tests/integration/test_b.py: imports pyspark (pyspark), which "
        "`pip install -e '.[test]'` does not install",
        "tests/unit/test_d.py: imports notapackage_at_all, which no known distribution provides "
        "(add it to DISTRIBUTION here and to the test extra)",
    ]
