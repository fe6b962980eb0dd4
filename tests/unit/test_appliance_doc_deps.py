"""docs/appliance.md stays true to the code: its ``/usr/lib/bookie`` row names every runtime
dependency of pyproject.toml, and its Check section lists every worker the bookie starts by
default, autorecovery included."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "appliance.md").read_text()


def test_the_opt_bookie_row_names_every_runtime_dependency():
    row = next(line for line in DOC.splitlines() if line.startswith("| `/usr/lib/bookie/` |"))
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0] for d in deps]
    missing = [n for n in names if n.lower() not in row.lower()]
    assert not missing, f"docs/appliance.md's /usr/lib/bookie row does not name {missing}"


def test_the_check_section_lists_every_default_worker():
    from bookie.workers.config import KEY_BY_NAME

    check = DOC[DOC.index("## Check"):DOC.index("## ", DOC.index("## Check") + 3)]
    for role in ("journal", "add", "read", "gc"):
        assert role in check, role
    if KEY_BY_NAME["autoRecoveryDaemonEnabled"].default in (True, "true"):
        assert "autorecovery" in check
