"""A real small filesystem for disk-full tests: a tmpfs mounted under the test's directory
(CI runs as root) and lazily unmounted afterwards, written once."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: str) -> Iterator[str]:
    """Mount a tmpfs of ``size`` (``16m``) at the new directory ``path``; yields it as a str."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
