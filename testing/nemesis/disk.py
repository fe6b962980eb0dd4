"""Full disks: small tmpfs mounts under some bookies' journal and ledger directories.

``DiskFaults.mount()`` (before the bookies start) puts a tmpfs of ``size_mb`` under
``bookie-i/journal`` and ``bookie-i/ledgers`` for the first ``count`` bookies.  ``fill``
takes every free byte of one of them with a ballast file (so the next journal preallocation,
entry-log write or index commit gets ENOSPC, and the bookie's disk check sees a full disk);
``free`` removes it.  Needs root (CI runs as root); ``available()`` says whether mounting works
here, and the runner turns the fault off (saying so) where it does not.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

BALLAST = ".nemesis-ballast"


def available() -> str | None:
    """None if tmpfs can be mounted here, else why not (one line)."""
    if os.geteuid() != 0:
        return "not root"
    probe = tempfile.mkdtemp(prefix="nemesis-mount-probe-")
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return f"mount -t tmpfs failed: {done.stderr.strip()}"
        subprocess.run(["umount", probe], capture_output=True)
        return None
    except OSError as exc:
        return f"mount not runnable: {exc}"
    finally:
        os.rmdir(probe)


class DiskFaults:
    """tmpfs mounts under the journal and ledger directories of bookies 0..count-1."""

    def __init__(self, bookies, count: int, size_mb: int = 160):
        self.bookies = bookies
        self.count = min(count, bookies.n)
        self.size_mb = size_mb
        self.mounted: list[str] = []
        self.full: set[tuple[int, str]] = set()

    def path(self, i: int, which: str) -> str:
        return os.path.join(self.bookies.bookie_dir(i), which)

    def mount(self) -> None:
        for i in range(self.count):
            for which in ("journal", "ledgers"):
                path = self.path(i, which)
                os.makedirs(path, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755",
                                "tmpfs", path], check=True, capture_output=True)
                self.mounted.append(path)

    def fill(self, i: int, which: str) -> None:
        """Take every free byte of bookie ``i``'s ``which`` ("journal" or "ledgers") disk."""
        ballast = os.path.join(self.path(i, which), BALLAST)
        with open(ballast, "ab", buffering=0) as f:  # unbuffered: ENOSPC shows at write()
            for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
                try:
                    while f.write(chunk):
                        pass
                except OSError:
                    pass
        self.full.add((i, which))

    def fill_to(self, i: int, which: str, fraction: float) -> None:
        """Fill bookie ``i``'s ``which`` disk until ``fraction`` of it is in use (past the
        bookie's ``diskUsageThreshold``, short of ENOSPC): the disk check turns it read-only."""
        path = self.path(i, which)
        st = os.statvfs(path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        want = max(0, int(total * fraction) - (total - free))
        with open(os.path.join(path, BALLAST), "ab", buffering=0) as f:
            chunk = b"\0" * (1 << 20)
            try:
                while want > 0:
                    want -= f.write(chunk[:min(len(chunk), want)])
            except OSError:
                pass
        self.full.add((i, which))

    def free(self, i: int, which: str) -> None:
        try:
            os.unlink(os.path.join(self.path(i, which), BALLAST))
        except FileNotFoundError:
            pass
        self.full.discard((i, which))

    def free_all(self) -> None:
        for i, which in list(self.full):
            self.free(i, which)

    def unmount(self) -> None:
        """Unmount every tmpfs (lazily: a bookie still stopping may hold files)."""
        for path in reversed(self.mounted):
            subprocess.run(["umount", "-l", path], capture_output=True)
        self.mounted.clear()
