"""Why this user cannot reach a path, in words an operator acts on ("permission denied: user U
may not enter the directory: DIR is OWNER's, mode 0700; run this as OWNER") rather than "does
not exist" or "no metadata store there", which is what a failed ``stat`` behind a directory
the user may not enter looks like. Used by the embedded store's open and by the bookie configuration's directory checks."""

from __future__ import annotations

import os
import pwd
import stat


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def access_problem(path: str, need: int = os.R_OK | os.X_OK) -> str | None:
    """A one-line "permission denied: ..." when this user may not reach ``path`` (an ancestor it
    may not enter) or may not use it (``need`` on ``path`` itself); None when it can, and when
    ``path`` is simply absent (that is another error, the caller's to name)."""
    path = os.path.abspath(path)
    # The nearest ancestor that cannot be entered hides everything below it.
    parts = path.split(os.sep)
    for i in range(2, len(parts)):
        ancestor = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(ancestor)
        except FileNotFoundError:
            return None
        except OSError:
            continue
        if not os.access(ancestor, os.X_OK):
            return _denied(ancestor, st, "may not enter the directory")
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode) and not os.access(path, need):  # a file: the caller's to name
        return _denied(path, st, "may not use")
    return None


def _denied(path: str, st: os.stat_result, what: str) -> str:
    owner = owner_name(st.st_uid)
    me = owner_name(os.geteuid())
    return (f"permission denied: user {me} {what}: {path} is {owner}'s, mode "
            f"{st.st_mode & 0o777:04o}; run this as {owner} (sudo -u {owner} ...)")
