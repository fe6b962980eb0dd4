"""Replacing a small file of a bookie's directories (its key, cookies, VERSION, the journal
stamps, LastLogMark) whole: the one writer of those files, so the rule lives in one place.

The rule (issue 39 item 3): the new contents go to ``PATH.tmp``, which is first unlinked if a
leftover is there (a crash between create and rename, or something planted: a link is removed,
never followed), then created ``O_CREAT | O_EXCL | O_NOFOLLOW`` with ``mode`` from its first
byte (0600 by default: cookies and the key are the bookie's alone), written, fsynced and
renamed over ``PATH`` (``rename`` replaces a link at ``PATH`` itself, never its target); the
directory is fsynced after.  If the tmp path reappears between the unlink and the create
(someone racing the writer in a directory it can write), the create fails rather than write
anywhere else: ``FileExistsError`` reaches the caller.
"""

from __future__ import annotations

import os

TMP_SUFFIX = ".tmp"
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def replace_file(path: str, data: bytes, mode: int = 0o600) -> None:
    """Make ``path`` hold ``data`` (module docstring).  Raises OSError."""
    tmp = path + TMP_SUFFIX
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    create_new(tmp, data, mode)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def create_new(path: str, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` anew (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a link, never
    over a file) with ``data`` and ``mode`` from its first byte, fsynced.  Raises OSError
    (``FileExistsError`` when anything is there); a half-written file is removed."""
    fd = os.open(path, _CREATE, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
