"""The host: another local user reads nothing of a bookie and plants nothing into it.

Runs as root (as CI does) so that a child can become ``nobody``; the bookie's parent directory
is made world-searchable on purpose (as /var/lib is), so that only the bookie's own modes stand
between ``nobody`` and its files.
"""

import glob
import os
import subprocess
import sys
import tempfile

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from bookie.storage.ring import Ring

NOBODY = 65534
KEY = b"host-test-master-key"

_AS_NOBODY = r"""
import os, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
opened = []
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        continue
    os.close(fd)
    opened.append(path)
print("\n".join(opened))
"""


def open_as_nobody(paths: list[str]) -> list[str]:
    """The paths ``nobody`` could open for reading."""
    assert os.geteuid() == 0, "the host tests run as root (as CI does) to become nobody"
    out = subprocess.run([sys.executable, "-c", _AS_NOBODY, *paths], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [line for line in out.splitlines() if line]


@pytest.fixture
def ens(secure_bookie):
    return secure_bookie


def _everything_under(root: str) -> list[str]:
    out = []
    for d, dirs, names in os.walk(root):
        out += [os.path.join(d, n) for n in names]
    return out


def test_nobody_opens_none_of_the_bookies_files_nor_its_ring(ens):
    ledger = 77
    create_ledgers(ens.metadata_uri, [ledger], KEY)  # a bookie stores only ids its store knows
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(ledger, [make_entry(ledger, i, b"secret payload") for i in range(10)], KEY) == Status.OK
    port = ens.ports[0]
    assert glob.glob(f"/dev/shm/bookie-{port}-*") == []  # the ring has no name (a memfd) ...
    sup = ens.procs[0].pid
    fds = [f"/proc/{sup}/fd/{n}" for n in os.listdir(f"/proc/{sup}/fd")]
    ring_fds = [fd for fd in fds if os.readlink(fd).startswith(f"/memfd:bookie-{port}-ring")]
    assert ring_fds  # ... reachable only through the bookie's own processes' descriptors
    os.close(os.open(ring_fds[0], os.O_RDONLY))  # as the bookie's user: yes; as nobody: below
    for sub in ("journal", "ledgers"):
        cur = os.path.join(ens.bookie_dir(0), sub, "current")
        assert os.stat(cur).st_mode & 0o777 == 0o700, cur
    files = _everything_under(ens.bookie_dir(0))  # data, index, cookies, lock, stats
    files += _everything_under(os.path.join(ens.base_dir, "metadata"))
    assert any(f.endswith("cookie") for f in files) and any("index" in f for f in files)
    for f in files:
        try:
            mode = os.stat(f).st_mode
        except FileNotFoundError:
            continue  # a temporary file renamed meanwhile (lastMark.tmp at a checkpoint)
        assert mode & 0o077 == 0, f
    files = [f for f in files if os.path.lexists(f)]
    assert open_as_nobody(files + ring_fds) == []


def test_the_ring_is_never_created_over_a_planted_file_or_through_a_link(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "planted-link"
    link.symlink_to(target)
    planted = tmp_path / "planted-file"
    planted.write_bytes(b"")
    for path in (link, planted):
        with pytest.raises(OSError):
            Ring.create(str(path), 4096)
    with pytest.raises(OSError):
        Ring.attach(str(link))
    assert target.read_bytes() == b"keep me"


@pytest.mark.security
def test_links_planted_under_the_old_predictable_ring_names_change_nothing(tmp_path):
    """Before: /dev/shm/bookie-PORT-PID.ring, opened with O_TRUNC by a root supervisor."""
    target = tmp_path / "root-owned"
    target.write_bytes(b"x" * 4096)
    os.chmod(tmp_path, 0o755)
    base = tempfile.mkdtemp(prefix="bookie-plant-")
    ens = LocalBookies(1, base_dir=base, conf={"flushInterval": 50, "metadataServiceUri": ""})
    port = ens.ports[0]
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last_pid = int(f.read())
    planted = [f"/dev/shm/bookie-{port}-{pid}.ring" for pid in range(last_pid + 1, last_pid + 3000)]
    try:
        for p in planted:
            os.symlink(target, p)
        with ens:
            with RawBookieClient(ens.bookies[0]) as c:
                assert c.add(5, [make_entry(5, 0, b"x")], KEY) == Status.OK
            assert target.read_bytes() == b"x" * 4096
            assert all(os.path.islink(p) for p in planted)
    finally:
        for p in planted:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
