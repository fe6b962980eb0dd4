"""docs/architecture.md shows the picture of one bookie (processes, rings, journal, index),
kept as a Graphviz source beside its rendering; the source still renders (where ``dot`` is)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_architecture_page_shows_the_picture_and_links_its_source():
    page = (DOCS / "architecture.md").read_text()
    assert "](images/architecture.png)" in page and "](images/architecture.dot)" in page
    assert (DOCS / "images" / "architecture.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    source = (DOCS / "images" / "architecture.dot").read_text()
    for part in ("supervisor", "journal worker", "add worker", "read worker", "GC worker",
                 "autorecovery worker", "ring", "journal files", "entry logs", "index (LMDB)"):
        assert part in source, part


def test_the_source_renders(tmp_path):
    dot = shutil.which("dot")
    if dot is None:  # Debian's graphviz (tests/setup.sh installs it)
        return
    out = tmp_path / "a.png"
    subprocess.run([dot, "-Tpng", str(DOCS / "images" / "architecture.dot"), "-o", str(out)],
                   check=True, capture_output=True, timeout=60)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
