"""Local ensembles: N real bookies on 127.0.0.1, for development and for test suites.

``LocalBookies`` starts each bookie as its own ``bookie run`` process (supervisor + workers) in
its own process group, with data under one base directory and an embedded LMDB metadata store
by default.  It creates the metadata store if there is none (one of the few things that may).
Started again on a base directory that holds bookies, each bookie comes back on the port in its
cookie, with its data.  ``bookie localbookie N`` (bookie.appliance.localbookie) is the
command-line face of it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from bookie.metadata import MetadataError, open_metadata
from bookie.properties import parse_bool
from bookie.storage.dirlock import DirectoryInUseError, DirectoryLock
from bookie.storage.layout import PUBLIC_KEY_FIELD, LayoutError, cookie_in, remembered_port
from bookie.testing.rawclient import forget_store, learn_key, learn_store
from bookie.workers.processes import set_pdeathsig, wait_exited
from bookie.workers.ports import reserve_port_pair
from bookie.workers.config import SECRET_KEYS


class LocalBookieError(RuntimeError):
    pass


class LocalBookies:
    """N bookies on 127.0.0.1.  A context manager; every wait has a timeout.

    Attributes:
        metadata_uri: the metadata store the bookies register in.
        bookies: bookie ids ("127.0.0.1:port", or ``bookie_ids`` when given), index i is
            bookie i.
        ports: each bookie's add port; set ``ports[i]`` before ``start(i)`` to move bookie i
            (a bookie with a ``bookie_ids`` id keeps serving its ledgers from the new port).
        base_dir: where data and logs live.

    ``journals`` > 1 gives each bookie that many journals (``journalDirectories``: its
    ``journal/`` first, then ``journal-1/``, ``journal-2/``, ... beside it).

    ``hosts`` (one address per bookie, default 127.0.0.1) and ``command_prefix`` (one argv
    prefix per bookie, e.g. ``["ip", "netns", "exec", "ns0"]``) run each bookie on an address
    of its own, inside a network namespace (the fault-injection harness's network faults).
    """

    def __init__(self, n: int, metadata_uri: str | None = None, base_dir: str | None = None,
                 base_port: int | None = None, conf: dict | None = None, start_timeout_s: float = 60.0,
                 hosts: list[str] | None = None, command_prefix: list[list[str]] | None = None,
                 log_format: str | None = None, admin_http: bool = False, journals: int = 1,
                 bookie_ids: list[str] | None = None):
        if n < 1:
            raise ValueError("need at least one bookie")
        self.n = n
        # journals > 1: each bookie gets that many journal directories (journalDirectories):
        # its journal/ and journal-1/, journal-2/, ... beside it
        self.journals = journals
        self._own_dir = base_dir is None
        self.base_dir = os.path.abspath(base_dir or tempfile.mkdtemp(prefix="localbookie-"))
        os.makedirs(self.base_dir, exist_ok=True)
        self.metadata_uri = metadata_uri or f"lmdb://{os.path.join(self.base_dir, 'metadata')}"
        self.conf = dict(conf or {})
        self.start_timeout_s = start_timeout_s
        self.log_format = log_format  # None: the bookie's default (logfmt); or "json"
        # admin_http: each bookie serves the HTTP admin API on a port of its own (admin_url(i)).
        # Ports chosen here stay reserved (workers/ports.py) until close(): no other chooser on
        # the host (another test process's ensemble) takes them, even while a bookie is down.
        self._reservations = []
        self.http_ports = [self.reserve_port() for _ in range(n)] if admin_http else []
        self.ports = []
        for i in range(n):
            # Started again on its directories, a bookie keeps its port: its id is in its cookie.
            remembered = remembered_port([os.path.join(self.bookie_dir(i), "journal"),
                                          os.path.join(self.bookie_dir(i), "ledgers")])
            self.ports.append(base_port + 2 * i if base_port else
                              remembered or self.reserve_port())
        self.hosts = list(hosts or ["127.0.0.1"] * n)
        self.command_prefix = [list(p) for p in (command_prefix or [[]] * n)]
        if len(self.hosts) != n or len(self.command_prefix) != n:
            raise ValueError("hosts and command_prefix need one item per bookie")
        # bookie_ids: each bookie's bookieId (a stable id, BP-41); else its address is its id
        self.bookie_ids = list(bookie_ids) if bookie_ids else None
        if self.bookie_ids is not None and len(self.bookie_ids) != n:
            raise ValueError("bookie_ids needs one id per bookie")
        self.bookies = self.bookie_ids or [f"{h}:{p}" for h, p in zip(self.hosts, self.ports)]
        self.procs: list[subprocess.Popen | None] = [None] * n
        self._log_offsets: dict[int, int] = {}
        self._logs = [None] * n
        # Each bookie says READY=1 here when it serves (the supervisor's NOTIFY_SOCKET):
        # wait_serving wakes on it instead of finding the log line at its next look.
        self._notify_dir: str | None = None
        self._notify: list[socket.socket | None] = [None] * n
        self._learnt: str | None = None  # the store raw clients look bookies up in (rawclient)
        self._socket_parent: str | None = None  # local_socket_parent()

    # -- paths -------------------------------------------------------------------------------------
    def bookie_dir(self, i: int) -> str:
        return os.path.join(self.base_dir, f"bookie-{i}")

    def log_path(self, i: int) -> str:
        return os.path.join(self.base_dir, f"bookie-{i}.log")

    def overrides(self, i: int) -> dict:
        d = self.bookie_dir(i)
        o = {
            "bookiePort": str(self.ports[i]),
            "journalDirectory": os.path.join(d, "journal"),
            "ledgerDirectories": os.path.join(d, "ledgers"),
            "metadataServiceUri": self.metadata_uri,
            "journalRingSizeMB": "32",
            "indexMapSizeMB": "256",
            "journalPreAllocSizeMB": "4",
            "gcWaitTime": "1000",
            "registrationLeaseMs": "2000",
            # Throwaway ensembles do not heal themselves unless asked (conf=
            # {"autoRecoveryDaemonEnabled": "true"}): tests that kill a bookie on purpose expect
            # its ledgers to stay as they left them, and every worker costs a process.
            "autoRecoveryDaemonEnabled": "false",
        }
        # Local sockets (workers/local_sockets.py) in a short directory every user can reach,
        # whatever base_dir is: bookie i makes its own i/ in it.  Not for a bookie in a network
        # namespace of its own: a Unix socket would pass by the network faults done to it.
        o["localSocketDirectory"] = os.path.join(self.local_socket_parent(), str(i)) \
            if self.hosts[i] == "127.0.0.1" else "none"
        if self.hosts[i] != "127.0.0.1":
            o["listeningInterface"] = self.hosts[i]
            # a test's private network namespace (testing/nemesis): serving in clear there is
            # the test's choice, refused for a real bookie unless the operator opts out
            o["allowInsecureClients"] = "true"
        if self.bookie_ids is not None:
            o["bookieId"] = self.bookie_ids[i]
        if self.http_ports:
            o["httpServerEnabled"] = "true"
            o["httpServerPort"] = str(self.http_ports[i])
        if self.journals > 1:
            o["journalDirectories"] = ",".join([o["journalDirectory"]] + [
                os.path.join(d, f"journal-{j}") for j in range(1, self.journals)])
        o.update({k: str(v) for k, v in self.conf.items()})
        if "journalDirectories" in o and "journalDirectory" in o and "journalDirectory" not in self.conf:
            del o["journalDirectory"]  # several journals: journalDirectories alone names them
        return o

    def local_socket_parent(self) -> str:
        """Where the bookies' local socket directories go: a short path (a socket path holds
        107 bytes at most), searchable by all and sticky as /tmp is, so that a bookie run as
        another user makes its own directory there and no one else can take it away."""
        if self._socket_parent is None:
            self._socket_parent = tempfile.mkdtemp(prefix="lbsock-")
            os.chmod(self._socket_parent, 0o1777)
        return self._socket_parent

    def journal_dirs(self, i: int) -> list[str]:
        """Bookie i's journal directories, journal 0 first."""
        o = self.overrides(i)
        dirs = [d for d in o.get("journalDirectories", "").split(",") if d]
        return dirs or [o["journalDirectory"]]

    def admin_url(self, i: int) -> str:
        """Base URL of bookie i's HTTP admin API (needs ``admin_http=True``)."""
        if not self.http_ports:
            raise LocalBookieError("start LocalBookies with admin_http=True for the admin API")
        return f"http://127.0.0.1:{self.http_ports[i]}"

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "LocalBookies":
        try:
            self.start_all()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start_all(self) -> None:
        self._init_metadata()
        for i in range(self.n):
            self.start(i, wait=False)
        for i in range(self.n):
            self.wait_serving(i)

    def _init_metadata(self) -> None:
        """Create the metadata store if there is none yet (bookies and clients never do)."""
        uri = self.conf.get("metadataServiceUri", self.metadata_uri)
        if not uri:
            return
        try:
            open_metadata(uri, timeout_s=self.start_timeout_s, create=True,
                          zk_security=self.zk_security()).close()
        except MetadataError as e:
            raise LocalBookieError(f"metadata store {uri}: {e}") from None

    def zk_security(self):
        """The ZooKeeper credentials and ACL of ``conf``'s zkEnableSecurity / zkDigestAuthFile
        (None: none).  Raises AccessDeniedError (a MetadataError) naming the key."""
        from bookie.metadata import load_zk_security  # lazy: kazoo
        return load_zk_security(parse_bool(str(self.conf.get("zkEnableSecurity", "false"))),
                                str(self.conf.get("zkDigestAuthFile", "")))

    def client_keys(self) -> dict:
        """The client configuration keys that reach this ensemble's metadata store (its
        ZooKeeper credentials, if ``conf`` has them)."""
        sec = self.zk_security()
        return {} if sec is None else {"zkEnableSecurity": sec.enabled,
                                       "zkDigestAuthFile": sec.source}

    def start(self, i: int, wait: bool = True) -> None:
        if self.procs[i] is not None and self.procs[i].poll() is None:
            raise LocalBookieError(f"bookie {i} is already running")
        self._learn_store()
        o = self.overrides(i)
        for d in [*self.journal_dirs(i), *o["ledgerDirectories"].split(","),
                  *o.get("indexDirectories", "").split(",")]:
            if d:
                os.makedirs(d, exist_ok=True)
        cmd = [*self.command_prefix[i], sys.executable, "-m", "bookie", "run"]
        if self.log_format:
            cmd += ["--log-format", self.log_format]
        secret = {k: v for k, v in o.items() if k in SECRET_KEYS}  # never on a command line
        if secret:
            path = os.path.join(self.bookie_dir(i), "secret.conf")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in secret.items())
            cmd += ["--conf", path]
        for k, v in o.items():
            if k not in secret:
                cmd += ["--set", f"{k}={v}"]
        log = open(self.log_path(i), "ab")
        self._log_offsets[i] = log.tell()  # wait_serving reads this start's lines only
        env = {**os.environ, "NOTIFY_SOCKET": self._notify_socket(i)}
        # Own session: kill(i) can SIGKILL the whole bookie at once.  PDEATHSIG: the bookies
        # stop with the process (thread) that started them, even if it dies without cleaning up.
        self.procs[i] = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=set_pdeathsig, env=env)
        log.close()
        if wait:
            self.wait_serving(i)

    def _notify_socket(self, i: int) -> str:
        """The path of bookie i's notify socket (made on first use; emptied of what an earlier
        start of bookie i sent)."""
        if self._notify_dir is None:  # short and private: a socket path has ~100 bytes at most
            self._notify_dir = tempfile.mkdtemp(prefix="lbnotify-")
        path = os.path.join(self._notify_dir, str(i))
        if self._notify[i] is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            s.bind(path)  # private (0700): a bookie run as another user is seen by its log line
            self._notify[i] = s
        self._notify[i].setblocking(False)
        _ready(self._notify[i])  # emptied: an earlier start's READY=1 must not count
        return path

    def wait_serving(self, i: int) -> None:
        """Return once bookie i serves: its READY=1 (the supervisor's notify protocol), or its
        ``bookie serving`` line in the log, whichever is seen first (the line is the record: a
        bookie that cannot reach the socket still counts).  Raises LocalBookieError if it exits
        or is not serving within ``start_timeout_s``."""
        deadline = time.monotonic() + self.start_timeout_s
        start_at = self._log_offsets.get(i, 0)
        notify = self._notify[i]
        while time.monotonic() < deadline:
            p = self.procs[i]
            if p.poll() is not None:  # what this start wrote, not a running instance's log
                raise LocalBookieError(f"bookie {i} exited with status {p.returncode}:\n"
                                       f"{self._log_since(i, start_at)[-3000:]}")
            with open(self.log_path(i), "rb") as f:
                f.seek(start_at)
                text = f.read()
                if b"supervisor: bookie serving" in text or b'"event":"bookie serving"' in text:
                    return self._learn_key(i)
            if notify is None:
                time.sleep(0.05)
                continue
            if select.select([notify], [], [], 0.05)[0] and _ready(notify):
                return self._learn_key(i)
        raise LocalBookieError(f"bookie {i} not serving after {self.start_timeout_s} s:\n{self.log(i)[-3000:]}")

    def _learn_key(self, i: int) -> None:
        """A bookie run without a metadata store publishes its key nowhere: raw clients take
        it from its cookie (the key it proves), as they would from its registration."""
        if self.conf.get("metadataServiceUri", self.metadata_uri):
            return
        cookie = cookie_in(self.journal_dirs(i)[0]) or {}
        key = cookie.get(PUBLIC_KEY_FIELD)
        learn_key(f"{self.hosts[i]}:{self.ports[i]}", key.encode("ascii") if key else None)

    def stop(self, i: int, timeout_s: float = 30.0) -> int:
        """SIGTERM bookie i and wait; returns its exit status."""
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return p.returncode if p else 0
        p.send_signal(signal.SIGTERM)
        try:
            return wait_exited(p, timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(i)
            raise LocalBookieError(f"bookie {i} did not stop within {timeout_s} s") from None

    def kill(self, i: int) -> None:
        """SIGKILL bookie i: the supervisor and all its workers at once."""
        p = self.procs[i]
        if p is None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(10)
        # Workers left orphaned by the kill (none, with the process group) would hold ports.
        self._wait_ports_free(i)

    def _wait_ports_free(self, i: int, timeout_s: float = 10.0) -> None:
        if self.command_prefix[i]:
            return  # its ports are in another network namespace: nothing here can hold them
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                for port in (self.ports[i], self.ports[i] + 1):
                    with socket.socket() as s:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        s.bind(("127.0.0.1", port))
                return
            except OSError:
                time.sleep(0.05)

    def worker_pid(self, i: int, role: str) -> int:
        """pid of bookie i's worker of ``role`` (journal, add, read, gc)."""
        sup = self.procs[i].pid
        want = f"bookie[{self.ports[i]}] {role}"
        for child in children_of(sup):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    title = f.read().replace(b"\0", b" ").strip().decode(errors="replace")
            except OSError:
                continue
            if title.startswith(want) and not title[len(want):].startswith("-"):  # journal-1
                return child
        raise LocalBookieError(f"no {role} worker found for bookie {i}")

    def kill_worker(self, i: int, role: str, sig: int = signal.SIGKILL) -> int:
        pid = self.worker_pid(i, role)
        os.kill(pid, sig)
        return pid

    def wait_worker_restarted(self, i: int, role: str, old_pid: int, timeout_s: float = 60.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                pid = self.worker_pid(i, role)
                if pid != old_pid and f"worker started role={role} pid={pid}" in self.log(i):
                    return pid
            except LocalBookieError:
                pass
            if self.procs[i].poll() is not None:
                raise LocalBookieError(f"bookie {i} stopped instead of restarting {role}:\n{self.log(i)[-3000:]}")
            time.sleep(0.05)
        raise LocalBookieError(f"{role} worker of bookie {i} not restarted within {timeout_s} s")

    def set_readonly(self, i: int, flag: bool = True) -> None:
        self.procs[i].send_signal(signal.SIGUSR1 if flag else signal.SIGUSR2)

    def running(self, i: int) -> bool:
        p = self.procs[i]
        return p is not None and p.poll() is None

    def _log_since(self, i: int, offset: int) -> str:
        try:
            with open(self.log_path(i), "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace").rstrip("\n")
        except OSError:
            return ""

    def log(self, i: int) -> str:
        try:
            with open(self.log_path(i), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _learn_store(self) -> None:
        """Let ``RawBookieClient(bookie_id)`` find these bookies' registrations (their
        addresses and keys) with no further argument (bookie.testing.rawclient)."""
        uri = self.conf.get("metadataServiceUri", self.metadata_uri)
        if self._learnt is not None or not uri:
            return
        try:
            learn_store(uri, self.zk_security())
        except MetadataError:
            return  # a store not made yet, or not for us: raw clients then need a resolver
        self._learnt = uri

    def close(self) -> None:
        if self._learnt is not None:
            forget_store(self._learnt)
            self._learnt = None
        for i in range(self.n):
            if self.running(i):
                self.procs[i].send_signal(signal.SIGTERM)
        for i in range(self.n):
            p = self.procs[i]
            if p is None:
                continue
            try:
                wait_exited(p, 20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        for i in range(self.n):
            self._remove_run_leftovers(i)
        for i, s in enumerate(self._notify):
            if s is not None:
                s.close()
                self._notify[i] = None
        if self._notify_dir is not None:
            shutil.rmtree(self._notify_dir, ignore_errors=True)
            self._notify_dir = None
        if self._socket_parent is not None:
            shutil.rmtree(self._socket_parent, ignore_errors=True)
            self._socket_parent = None
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        for reservation in self._reservations:
            reservation.release()

    def reserve_port(self) -> int:
        """A port P (P and P+1 free) for a bookie of this ensemble, kept from every other chooser
        on the host until ``close()`` (workers/ports.py)."""
        reservation = reserve_port_pair("127.0.0.1")
        self._reservations.append(reservation)
        return reservation.port

    def _remove_run_leftovers(self, i: int) -> None:
        """Remove what bookie i, SIGKILLed and not started again, left outside its directories
        (its run directory under /tmp): the bookie's next start would, and none is coming.  The
        same rule as that start's: the path its directory lock records (storage/dirlock.py)."""
        journal = self.journal_dirs(i)[0]
        if not os.path.isdir(journal):
            return
        try:
            lock = DirectoryLock.acquire([journal], purpose="clean up after", wait_for_dead_holder_s=10)
        except (DirectoryInUseError, LayoutError, OSError):
            return  # still held, or not ours to read: leave it
        try:
            for path in lock.leftovers():
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            lock.set_runtime()  # nothing left outside the directories now
        finally:
            lock.release()


def _ready(notify: socket.socket) -> bool:
    """Whether the datagrams waiting on ``notify`` include READY=1; reads them all."""
    ready = False
    with contextlib.suppress(BlockingIOError):
        while True:
            ready |= b"READY=1" in notify.recv(4096).split(b"\n")
    return ready


def children_of(pid: int) -> list[int]:
    """The pids of ``pid``'s children (from /proc; none when it is gone)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def smoke(ens: LocalBookies) -> str:
    """Write and read back a ledger through the client, then delete it; returns a one-line
    report."""
    from bookie.client import BookKeeper  # lazy: asyncio

    t0 = time.monotonic()
    n = 100
    ensemble = min(3, ens.n)
    with BookKeeper(ens.metadata_uri, ens.client_keys()) as bk:
        lh = bk.create_ledger(ensemble_size=ensemble, write_quorum=min(2, ensemble),
                              ack_quorum=min(2, ensemble), digest="crc32c", password=b"smoke")
        futures = [lh.add_entry_async(b"smoke-%d" % i) for i in range(n)]
        for f in futures:
            f.result(timeout=30)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, digest="crc32c", password=b"smoke")
        got = [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]
        rh.close()
        # a check, not data: an ensemble started again on its --dir does not gather them
        bk.delete_ledger(lh.ledger_id)
    if got != [b"smoke-%d" % i for i in range(n)]:
        raise LocalBookieError(f"smoke check failed: read back {len(got)} entries that differ")
    return (f"smoke: wrote and read back {n} entries of ledger {lh.ledger_id} "
            f"(E={ensemble}) in {time.monotonic() - t0:.2f} s: ok")
