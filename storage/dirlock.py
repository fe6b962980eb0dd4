"""The bookie's hold on its directories: one running bookie per journal, ledger and index dir.

Each of the bookie's directories (``layout.all_dirs``) gets a file ``bookie.lock`` beside its
``current/``, locked with ``flock(LOCK_EX)`` for as long as the bookie runs.  The lock belongs to
the open file, not to a process: the supervisor takes it and hands the descriptors to every
worker it starts (``fds``), so it is held while *any* process of the bookie lives, and it is
released by the kernel when the last of them exits, however it ends (a clean stop, SIGKILL of
the supervisor while its workers finish, SIGKILL of the whole group).  A restarted worker
inherits the descriptors again.  Nothing has to be cleaned up for the lock itself to go.

The file's content says who holds it and what that bookie made outside its directories, as one
JSON object (informational; the flock alone decides)::

    {"pid": 4242, "run_dir": "/tmp/bk3181-x1y2", "ring": "/dev/shm/bookie-3181-k3j9x.ring"}

The run directory is made in ``run_dir_parent()``: the unit's ``RuntimeDirectory=`` (/run/bookie)
under systemd, else the temporary directory.  ``held_record`` is how a tool finds the running
bookie: by the kernel's lock, never by the record alone (its user can write anything there).

A bookie that took the lock from a predecessor that died without stopping finds the
predecessor's runtime paths there and removes them (``leftovers``), so repeated kills leave
nothing that grows; anyone else who takes the lock (``bookieformat``) keeps them recorded for
the next bookie.  A clean stop leaves ``{}``.  Whoever is refused reads the pid to name the
holder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
import time

import orjson

from bookie.storage.errors import LayoutError

LOCK_FILE = "bookie.lock"
RUNTIME_KEYS = ("run_dir", "ring")


class DirectoryInUseError(LayoutError):
    """A directory is held by another bookie (or its workers); the message names its pid."""

    def __init__(self, directory: str, holder: str, holder_dead: bool, purpose: str):
        super().__init__(f"{directory} is in use by {holder}; refusing to {purpose} (stop that "
                         f"bookie first)")
        self.directory = directory
        self.holder = holder  # in words, naming the pid
        self.holder_dead = holder_dead  # the holder's supervisor is gone; its workers are not


def run_dir_parent() -> str:
    """Where a bookie makes its run directory: the unit's ``RuntimeDirectory=`` when systemd
    gives one (``$RUNTIME_DIRECTORY``, /run/bookie: the host and ``bookie shell`` see it, where
    the unit's private /tmp is hidden from them), else the temporary directory."""
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return runtime if os.path.isabs(runtime) else tempfile.gettempdir()


def held_record(directory: str) -> dict | None:
    """The record of the bookie holding ``directory``'s lock now, or None when nobody holds it.

    The kernel decides, not the record: the lock file is opened without following a link
    (``O_NOFOLLOW``) and a shared flock is tried; only when that is refused is the record read
    (it names the holder's pid and run directory, which the caller must still check).

    Raises:
        LayoutError: the lock file cannot be opened (a link, no permission).
    """
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LayoutError(f"{path}: cannot open the directory lock: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return _read_record(fd)
            raise LayoutError(f"{path}: cannot test the lock: {e.strerror}") from None
        return None  # nobody holds it (our shared lock goes with the descriptor)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_record(fd: int) -> dict:
    try:
        raw = os.pread(fd, 4096, 0)
        record = orjson.loads(raw) if raw.strip() else {}
    except (OSError, orjson.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _holder(record: dict) -> tuple[str, bool]:
    """Who holds a lock, in words, from the record found in its file; and whether the process
    named there is dead (then only its workers hold the lock, and they are stopping)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return "another process (a bookie starting, or a format in progress)", False
    if _pid_alive(pid):
        return f"a running bookie (pid {pid})", False
    return f"the workers of bookie pid {pid}, which died; they are still stopping", True


class DirectoryLock:
    """The flocks on a bookie's directories, taken all or none.

    Invariant: while this object is open, no other ``DirectoryLock`` on any of the same
    directories can be taken, on this host, by any process.
    """

    def __init__(self, dirs: list[str], fds: list[int], previous: dict):
        self.dirs = dirs
        self.fds = fds
        self.previous = previous  # the record a predecessor left (empty after a clean stop)
        self._runtime = {k: v for k, v in previous.items() if k in RUNTIME_KEYS}

    @classmethod
    def acquire(cls, dirs: list[str], purpose: str = "start",
                wait_for_dead_holder_s: float = 0.0) -> "DirectoryLock":
        """Lock every directory of ``dirs`` (distinct real paths).

        Args:
            purpose: what the caller is about to do, for the refusal message.
            wait_for_dead_holder_s: if the holder's supervisor is dead and only its workers
                still hold the lock (they stop on their own), wait this long for them.
        Raises:
            DirectoryInUseError: one of them is held; none is held by us afterwards.
            LayoutError: a lock file cannot be opened (the message names it).
        """
        deadline = time.monotonic() + wait_for_dead_holder_s
        while True:
            try:
                return cls._try_acquire(dirs, purpose)
            except DirectoryInUseError as e:
                if not e.holder_dead or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)

    @classmethod
    def _try_acquire(cls, dirs: list[str], purpose: str) -> "DirectoryLock":
        fds: list[int] = []
        previous: dict = {}
        try:
            for d in dirs:
                path = os.path.join(d, LOCK_FILE)
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                                 0o600)
                except OSError as e:
                    raise LayoutError(f"{path}: cannot open the directory lock: "
                                      f"{e.strerror}") from None
                fds.append(fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise LayoutError(f"{path}: cannot lock: {e.strerror}") from None
                    holder, dead = _holder(_read_record(fd))
                    raise DirectoryInUseError(d, holder, dead, purpose) from None
                previous = previous or _read_record(fd)
            lock = cls(list(dirs), fds, previous)
            lock._write()
            return lock
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def _write(self, with_pid: bool = True) -> None:
        """Put the record in every lock file: our pid (while we hold it) and the runtime paths
        that whoever next takes the lock as a bookie must remove unless they are gone."""
        record = {"pid": os.getpid()} if with_pid else {}
        data = orjson.dumps({**record, **self._runtime})
        for fd in self.fds:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)

    def set_runtime(self, run_dir: str | None = None, ring: str | None = None) -> None:
        """Record what this bookie makes outside its directories (before making it), or, with
        no arguments, that it has removed them again."""
        self._runtime = {k: v for k, v in (("run_dir", run_dir), ("ring", ring)) if v}
        self._write()

    def leftovers(self) -> list[str]:
        """Paths a predecessor that did not stop cleanly made outside its directories and left
        behind: its run directory and its shared-memory ring, if they are still there.  Only
        paths of the shapes a bookie makes are returned, whatever the record says."""
        out = []
        run_dir = self.previous.get("run_dir")
        if isinstance(run_dir, str) \
                and os.path.dirname(run_dir) in (tempfile.gettempdir(), run_dir_parent()) \
                and os.path.basename(run_dir).startswith("bk") and not os.path.islink(run_dir) \
                and os.path.isdir(run_dir):
            out.append(run_dir)
        ring = self.previous.get("ring")  # the ring's private directory (an older bookie: the file)
        if isinstance(ring, str) and os.path.basename(ring).startswith("bookie-") \
                and ring.endswith(".ring") and not os.path.islink(ring) \
                and (os.path.isfile(ring) or os.path.isdir(ring)):
            out.append(ring)
        return out

    def release(self) -> None:
        """Drop the locks (idempotent), keeping in the record only runtime paths still to be
        removed.  Processes that inherited the descriptors keep the locks until they exit."""
        if not self.fds:
            return
        try:
            self._write(with_pid=False)
        except OSError:
            pass  # the lock goes with the descriptors anyway
        for fd in self.fds:
            os.close(fd)
        self.fds = []
