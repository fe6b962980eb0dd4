"""Every import package of the source tree is in pyproject.toml's package list.

An editable install (the tests', the README's) imports straight from the tree and hides a
missing entry; a wheel or the Debian package built from the list would lack the package, and a
bookie that needs it would not start (bookie.autorecovery was missing this way)."""

import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_package_of_the_tree_is_installed():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for d, dirs, files in os.walk(ROOT):
        rel = os.path.relpath(d, ROOT)
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("tests", "build", "dist")
                   and not x.endswith(".egg-info") and x != "__pycache__"]
        if "__init__.py" in files:
            found.add("bookie" if rel == "." else "bookie." + rel.replace(os.sep, "."))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed but not in the tree"
