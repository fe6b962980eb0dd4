"""Reading a file that holds a secret (a password, a token): the checks every such key shares.

``read_private_file(key, path)`` opens the file named by configuration key ``key`` and returns
its bytes, or raises ``AccessDeniedError`` with one line naming the key and the file when it
cannot be read, is not a regular file, or is open to group or other (any of the mode bits
0o077: a secret readable, or replaceable, by another user is no secret).  Nothing of the
contents ever goes into a message.  What the bytes must hold is the caller's to check:
``zkDigestAuthFile`` (metadata/zk_acl.py) one ``user:password`` line,
``httpServerAuthTokenFile`` (appliance/startchecks.py) one token.
"""

from __future__ import annotations

import os
import stat

from bookie.metadata.errors import AccessDeniedError

MAX_SECRET_FILE_BYTES = 4096


def read_private_file(key: str, path: str, max_bytes: int = MAX_SECRET_FILE_BYTES) -> bytes:
    """The first ``max_bytes + 1`` bytes of ``path`` (one more than allowed, so that the caller
    can tell an oversized file); see the module docstring for what is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise AccessDeniedError(f"{key}: cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AccessDeniedError(f"{key}: {path} is not a regular file")
        if st.st_mode & 0o077:
            raise AccessDeniedError(
                f"{key}: {path} is open to group or other (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); it holds a secret: chmod 600 it")
        try:
            return os.read(fd, max_bytes + 1)
        except OSError as e:
            raise AccessDeniedError(f"{key}: cannot read {path}: {e.strerror}") from None
    finally:
        os.close(fd)
