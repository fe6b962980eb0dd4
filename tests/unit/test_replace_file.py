"""The one writer of a bookie directory's small files (storage/replace_file.py): a leftover or
planted ``.tmp`` (a file, a link, dangling or not) is removed, never written through; a link at
the path itself is replaced, not followed; the file is 0600 whatever the umask."""

import os

import pytest

from bookie.storage.replace_file import replace_file


@pytest.mark.parametrize("planted", ["file", "link", "dangling"])
def test_a_planted_tmp_is_never_written_through(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim's own")
    path = str(tmp_path / "cookie")
    tmp = path + ".tmp"
    if planted == "file":
        with open(tmp, "wb") as f:
            f.write(b"leftover")
    else:
        os.symlink(str(victim) if planted == "link" else str(tmp_path / "nowhere"), tmp)
    old = os.umask(0o022)
    try:
        replace_file(path, b"new cookie")
    finally:
        os.umask(old)
    assert victim.read_bytes() == b"victim's own"
    assert not (tmp_path / "nowhere").exists()
    assert open(path, "rb").read() == b"new cookie"
    assert not os.path.islink(path) and os.stat(path).st_mode & 0o777 == 0o600
    assert not os.path.lexists(tmp)


def test_a_link_at_the_path_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"victim's own")
    path = str(tmp_path / "VERSION")
    os.symlink(str(victim), path)
    replace_file(path, b"1\n")
    assert victim.read_bytes() == b"victim's own"
    assert not os.path.islink(path) and open(path, "rb").read() == b"1\n"
