"""The supervisor: one per bookie.  Starts, watches, restarts and stops the workers.

Start order: lock the bookie's directories (``storage/dirlock.py``: a second bookie on them is
refused, naming the pid that holds them); resolve ``bookiePort=0`` (the port the directories
were stamped with, else a free one); check that every listening port is free; remove what a
predecessor killed without stopping left behind (run directory; an older bookie's ring
directory); check the directory layout and cookies, and the cookie in the metadata store (which
must exist); check the index against the entry logs (``storage/index_rebuild.py``: a mismatch names
the fix); create the shared-memory rings (memfds: no name, inherited by the workers that map
them), one per journal; start the journal workers, one per journal directory (each finds its
journal's end) and wait until they are ready; start
the add worker (it replays the journal from LastLogMark) and wait; start the read
and GC workers; register the bookie in the metadata store.  Every refusal up to the index
check is one log line and exit status 2, before anything is registered or created.

Serving, the supervisor says so on stderr (``bookie serving``) and, when started with
``NOTIFY_SOCKET`` in its environment, to that socket (systemd's notify protocol: ``READY=1``;
``STOPPING=1`` when it begins to stop), so whoever started it need not poll its log.

Stop order (SIGTERM / SIGINT): unregister; stop read and GC; stop the add worker (it answers
what is durable and checkpoints); stop the journal (it writes what is left); close the ring;
release the directories.

Workers are started with fork+exec (``python -m bookie.workers ROLE``), so no LMDB environment,
ZeroMQ context or thread of the supervisor ever crosses into a worker.  Each worker gets
``PR_SET_PDEATHSIG`` so that it stops when the supervisor is gone, and inherits the descriptors
of the directory lock, so the directories stay locked until the last process of the bookie is
gone, whether it stopped cleanly or was killed.

A worker that dies is restarted (the add worker first waits until the journal has written what
it left in the ring, then replays; the journal continues from the end of its files), in
dependency order: journals before the add worker, and a journal that dies while a new add
worker waits for it is restarted during that wait.  At most
``workerRestartLimit`` times a minute (a restart that fails - the new worker killed before it was
ready - counts as one more and is retried); past that, or when the journal reports corruption (exit
status 3), the bookie stops cleanly and says why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from bookie.appliance import spawn, store_identity
from bookie.appliance.exposition import BookieRegistry
from bookie.appliance.memory_watch import MemoryWatch
from bookie.appliance.registrar import Registrar
from bookie.appliance.spawn import Worker, WorkerStartError
from bookie.appliance.startchecks import StartRefused, check_admin_security, \
    check_bookie_id, check_client_security, check_dirs_usable, check_ports_free
from bookie.core import diskcheck
from bookie.core.supervision import (DisksFull, Log, ReadOnly, ReadOnlyCause, RequestGc, Restart,
                                     RestartFailed, Stop, Supervision, WorkerDied)
from bookie.workers.config import BookieConfig
from bookie.workers.auth import plaintext_for_bench
from bookie.workers import local_sockets
from bookie.client.local_sockets import LOCAL_FIELD, published
from bookie.storage.dirlock import DirectoryInUseError, DirectoryLock, run_dir_parent
from bookie.metadata import MetadataError, NodeExistsError
from bookie.metadata.recovery_secret import write_secret_file
from bookie.storage import server_key
from bookie.storage.layout import (PUBLIC_KEY_FIELD, LayoutError, all_dirs, check_or_stamp,
                                   local_cookie, remembered_port)
from bookie.storage.index_check import check_index
from bookie.workers.common import log_line as log
from bookie.workers.processes import wait_exited
from bookie.workers.ports import free_port_pair
from bookie.workers.gc_worker import request_gc
from bookie.storage.ring import JOURNAL_NO_ROOM, NO_ROOM, READONLY, Ring
from bookie.storage.journal_set import roles as journal_roles

ROLES_IN_START_ORDER = ("journal", "add", "read", "gc")  # "journal": every journal's worker
EXIT_REFUSED = 2
EXIT_CORRUPT = 3
EXIT_SYNC_FAILED = 4
FATAL_EXITS = {EXIT_CORRUPT: "found corruption", EXIT_SYNC_FAILED: "could not make the journal durable"}
# A predecessor killed with SIGKILL leaves its workers stopping (PDEATHSIG) with the directories
# still locked; a new start waits this long for them before it refuses.
DEAD_HOLDER_WAIT_S = 30.0


class Supervisor:
    def __init__(self, conf: BookieConfig, lock: DirectoryLock):
        self.conf = conf
        self.lock = lock  # held (with the workers) until shutdown
        self.name = f"bookie[{conf.bookie_port}] supervisor"
        # One journal worker per journal directory (storage/journal_set.py), then the others;
        # the autorecovery worker (bookie.autorecovery) only with a metadata store to heal in.
        self.journal_roles = journal_roles(len(conf.journal_dirs))
        self.start_roles = self.journal_roles + ROLES_IN_START_ORDER[1:]
        self.roles = self.start_roles + (
            ("autorecovery",) if conf.metadata_uri and conf.autorecovery_enabled else ())
        self.workers = {role: Worker(role) for role in self.roles}
        self.stopping = False
        self.stop_reason = ""
        self.exit_code = 0
        self.ring = None  # ring 0: journal 0's, and the control words (READONLY, NO_ROOM)
        self.rings: list[Ring] = []  # journal i's at [i]
        self.run_dir = ""
        self.registration = None
        self.registrar = None
        self.store = None
        self.signalled_readonly = None  # set by SIGUSR1 / SIGUSR2, applied by the watch loop
        self.signalled_stop = ""  # set by SIGTERM / SIGINT, applied by the watch loop
        # the policy (core/supervision.py): restarts, their limit, fatal exits, read-only
        self.policy = Supervision(conf.worker_restart_limit, FATAL_EXITS,
                                  conf.read_only_mode_enabled,
                                  gc_wait_s=conf.gc_wait_s if conf.metadata_uri else None)
        self.memory = MemoryWatch(conf.worker_memory_limit_bytes)  # memory_watch.py
        self.disk_states: dict[str, str] = {}  # directory -> ok / warn / full (diskcheck)
        self.http = None  # /metrics on prometheusStatsHttpPort
        self.admin_http = None  # the admin API on httpServerPort
        self.admin_token = None  # httpServerAuthTokenFile's token (startchecks.check_admin_security)
        self.metrics = None  # exposition.BookieRegistry of this run
        self._readonly_lock = threading.RLock()  # the admin API's threads, signals, the loop
        self.started = False  # something was created that shutdown must undo
        # systemd's notify protocol; taken out of the environment: workers never send (sd_notify)
        self.notify_socket = os.environ.pop("NOTIFY_SOCKET", "")
        self.local_dir = ""  # the local sockets' directory ("": TCP only), set at start

    def log(self, event: str, **fields) -> None:
        log(self.name, event, **fields)

    # What the workers and the store are told, and its causes (the policy's state).
    readonly = property(lambda self: self.policy.readonly)
    forced_readonly = property(lambda self: self.policy.causes["forced"])
    disks_full = property(lambda self: self.policy.causes["disks_full"])
    no_room = property(lambda self: self.policy.causes["no_room"])  # ring NO_ROOM: a ledger disk
    journal_full = property(lambda self: self.policy.causes["journal_full"])  # JOURNAL_NO_ROOM

    def _carry_out(self, actions: list, worker: Worker | None = None) -> None:
        """Do what the policy decided: log lines, a stop, read-only, a worker's restart (whose
        failure is the policy's next event)."""
        pending = list(actions)
        while pending:
            action = pending.pop(0)
            if isinstance(action, Log):
                fields = dict(action.fields)
                if worker is not None and worker.proc is not None and "role" in fields:
                    fields["pid"] = worker.proc.pid
                self.log(action.event, level=action.level, **fields)
            elif isinstance(action, Stop):
                self.request_stop(action.reason, action.code)
            elif isinstance(action, ReadOnly):
                self.ring.set(READONLY, 1 if action.on else 0)
                if self.registrar is not None:
                    self.registrar.want_readonly = action.on  # its thread moves the registration
            elif isinstance(action, RequestGc):
                try:
                    request_gc(self.run_dir, major=action.major)
                except OSError as e:
                    self.log("could not ask for a GC pass", error=str(e))
            elif isinstance(action, Restart):
                w = self.workers[action.role]
                w.restarts_total += 1
                try:
                    self._start_worker(w.role)
                except WorkerStartError as e:
                    if self.stopping:
                        return
                    pending = self.policy.handle(RestartFailed(w.role, e.returncode, str(e)),
                                                 time.monotonic())

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the bookie (module docstring: start order).

        Raises:
            StartRefused, LayoutError: refused before anything was created or registered.
            WorkerStartError: a worker did not become ready.
        """
        conf = self.conf
        os.umask(0o077)  # every file and directory the bookie makes is its user's alone
        check_ports_free(conf)
        check_bookie_id(conf)  # a bookieId shaped host:port must be our own address
        check_dirs_usable(conf)  # a root-owned file named as one, not as missing data
        security = check_client_security(conf)  # refuses an exposed bookie without CURVE
        self.admin_token, admin_note = check_admin_security(conf)  # and an exposed admin API
        if conf.metadata_uri:
            self._open_store()  # a URI naming no store is refused before the disks are stamped
        self._remove_leftovers()
        # the bookie's keypair (made at its first start) and its public half in the cookie
        existing = local_cookie(conf)
        if existing is not None:  # the layout first: a swapped or missing disk is named as one,
            check_or_stamp(conf)  # not as a lost key file (the key lives in the first journal)
        self.public_key = server_key.ensure(conf, existing)
        cookie = check_or_stamp(conf, self.public_key)
        if conf.metadata_uri:
            store_identity.check_cookie_in_store(self._open_store(), conf, cookie)
        secret = (store_identity.cluster_recovery_secret(self._open_store(), conf, self.log)
                  if conf.metadata_uri else None)
        index_problem = check_index(conf)  # the index against the entry logs (storage/index_rebuild.py)
        if index_problem:
            raise StartRefused(index_problem)
        conf = self.conf = self._local_sockets(conf)  # after the data directories' own checks
        self.started = True
        self.run_dir = tempfile.mkdtemp(prefix=f"bk{conf.bookie_port}-", dir=run_dir_parent())
        self.metrics = BookieRegistry(self, self.run_dir)
        self.lock.set_runtime(self.run_dir)  # before it has files: none leaks if we are killed
        # no name anywhere: the workers inherit the descriptor (storage/ring.py)
        for i in range(len(conf.journal_dirs)):
            self.rings.append(Ring.create_memfd(f"bookie-{conf.bookie_port}-ring-{i}",
                                                conf.ring_size_bytes))
        self.ring = self.rings[0]
        with open(os.path.join(self.run_dir, "ring.path"), "w") as f:
            f.write("\n".join(r.address for r in self.rings) + "\n")
        with open(os.path.join(self.run_dir, "bookie.conf"), "w") as f:
            f.write(conf.to_properties())
        if secret:  # to the add worker privately (0600 in the 0700 run dir), never on a command line
            write_secret_file(self.run_dir, secret)
        # Every worker process is launched now and imports its code meanwhile (a third of a
        # second of CPU each), but waits for its go before it opens anything: they still start
        # one after the other, in the order the module docstring gives.
        launched = {role: self._launch(role) for role in self.start_roles}
        try:
            self._check_disks()  # full disks: read-only (and a GC pass asked for) before serving
            for role in self.start_roles:
                self._start_worker(role, launched.pop(role))
        finally:
            for r, go_w in launched.values():  # a start abandoned: they exit, opening nothing
                os.close(go_w)
                os.close(r)
        if conf.metadata_uri:
            self._register()
        if "autorecovery" in self.workers:
            self._start_worker("autorecovery")
        self._start_http()
        if security:
            log(self.name, security[1], level=security[0], interface=conf.listening_interface)
        if admin_note:
            log(self.name, admin_note[1], level=admin_note[0], host=conf.http_server_host)
        self.log("bookie serving", bookie_id=conf.bookie_id, address=conf.bookie_address,
                 add_port=conf.bookie_port,
                 read_port=conf.bookie_port + 1, metadata=conf.metadata_uri or "none")
        self.notify(b"READY=1")

    def _local_sockets(self, conf: BookieConfig) -> BookieConfig:
        """``conf`` naming the local socket directory made ready (workers/local_sockets.py), or
        ``none`` when the bookie serves over TCP only; the workers bind what it names."""
        try:
            directory, warning = local_sockets.prepare(conf.local_socket_dir, conf.bookie_port)
        except local_sockets.LocalSocketError as e:
            raise StartRefused(str(e)) from None
        if warning:
            self.log("no local sockets", level="warning", reason=warning)
        self.local_dir = directory
        values = conf.as_dict()
        values["localSocketDirectory"] = directory or local_sockets.OFF
        return BookieConfig(values, conf.warnings)

    def _local_info(self) -> dict:
        """The registration's field of the local sockets (client/local_sockets.py), if any."""
        if not self.local_dir:
            return {}
        add, read = local_sockets.socket_paths(self.local_dir, self.conf.bookie_port)
        roles = self.conf.local_client_roles
        # the uids a client may connect there as: every one, unless roles are given, or
        # enrolled keys are (then none without a role: such a client uses TCP with its key)
        uids = sorted(local_sockets.parse_roles(roles)) if roles else (
            [] if self.conf.curve_client_keys_dir else None)
        return {LOCAL_FIELD: published(self.local_dir, add, read, uids)}

    def notify(self, state: bytes) -> None:
        """Send ``state`` to ``NOTIFY_SOCKET`` if there is one (a path, or ``@name`` for an
        abstract socket).  Best effort: the log line is the record, and a listener that is gone
        or out of reach changes nothing for the bookie."""
        if not self.notify_socket:
            return
        address = self.notify_socket
        if address.startswith("@"):
            address = "\0" + address[1:]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(state + b"\nMAINPID=%d" % os.getpid(), address)
        except OSError as e:
            self.log("could not notify", socket=self.notify_socket, error=e.strerror)

    def _remove_leftovers(self) -> None:
        """Remove the run directory and ring of a predecessor on these directories that was
        killed without stopping (we hold its lock now, so none of its processes is left)."""
        for path in self.lock.leftovers():
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError as e:
                self.log("could not remove what a killed bookie left", path=path, error=e.strerror)
                continue
            self.log("removed what a killed bookie left", path=path)

    def _launch(self, role: str) -> tuple[int, int]:
        """Launch ``role``'s worker (appliance/spawn.py): it imports its code, then waits for
        its go.  Returns its pipes, for ``_start_worker``."""
        return spawn.launch(self.workers[role], self.run_dir, tuple(r.fd for r in self.rings),
                            self.lock.fds, self.metrics.worker_env())

    def _start_worker(self, role: str, launched: tuple[int, int] | None = None) -> None:
        """Start ``role``'s worker (launched by ``_launch`` unless given) and wait until it is
        ready; journals that die meanwhile are restarted while an add worker waits for them.
        Raises WorkerStartError."""
        spawn.start(self.workers[role], launched if launched is not None else self._launch(role),
                    self.log, self._restart_dead_journals if role == "add" else None,
                    lambda: self.stopping)

    def _open_store(self):
        """The metadata store, opened once (appliance/store_identity.py)."""
        if self.store is None:
            self.store = store_identity.open_store(self.conf)
        return self.store

    def _register(self) -> None:

        # host and add_port are where clients reach a bookie with a named id (client/resolver.py)
        info = {"add_port": self.conf.bookie_port, "read_port": self.conf.bookie_port + 1,
                "host": self.conf.bookie_host, "pid": os.getpid(),
                "location": self.conf.bookie_location,  # placement (client/protocol/placement.py)
                # what clients pin (client/resolver.py); none for a benchmark's plain baseline
                PUBLIC_KEY_FIELD: "" if plaintext_for_bench() else self.public_key,
                **self._local_info()}
        try:
            self.registration = self._open_store().register_bookie(
                self.conf.bookie_id, readonly=self.readonly, info=info)
        except NodeExistsError as e:
            raise StartRefused(str(e)) from None
        except MetadataError as e:
            raise WorkerStartError.other(f"registering in {self.conf.metadata_uri}: {e}") from None
        self.log("registered", metadata=self.conf.metadata_uri)
        # From now on only the registrar's thread calls the store (appliance/registrar.py).
        self.registrar = Registrar(self.registration, self.log)

    # -- watch -----------------------------------------------------------------------------------
    def watch(self) -> int:
        next_disk_check = 0.0
        while not self.stopping:
            time.sleep(0.05)
            self._take_signals()
            if self.stopping:
                break
            for role in self.roles:
                w = self.workers[role]
                if w.proc is None or w.proc.poll() is None:
                    continue
                self._worker_died(w)
                if self.stopping:
                    break
            if self.memory.due() and not self.stopping:
                self._check_memory()
            now = time.monotonic()
            if now >= next_disk_check and not self.stopping:
                next_disk_check = now + self.conf.disk_check_interval_s
                self._check_disks()
        self._take_signals()
        self.shutdown()
        return self.exit_code

    def _worker_died(self, w: Worker) -> None:
        self.metrics.worker_gone(w.proc.pid)
        died = WorkerDied(w.role, w.proc.returncode, w.killed_for_memory)
        w.killed_for_memory = False
        # A restart that fails (the new worker killed before it was ready: an OOM kill, a slow
        # start) is one more restart under the same limit, never a reason of its own to stop.
        self._carry_out(self.policy.handle(died, time.monotonic()), w)

    def _restart_dead_journals(self) -> None:
        """Restart in dependency order: an add worker starting waits until every journal has
        made durable what the ring holds, so a journal worker that died meanwhile is restarted
        now, while the add worker waits, not after it (it would wait for that journal in vain,
        give up, and be restarted, forever)."""
        for role in self.journal_roles:
            j = self.workers[role]
            if self.stopping:
                return
            if j.proc is not None and j.proc.poll() is not None:
                self._worker_died(j)

    def _check_memory(self) -> None:
        """Kill the workers over workerMemoryLimitMB; the watch loop restarts them (memory_watch.py)."""
        pids = {role: w.proc.pid for role, w in self.workers.items()
                if w.proc is not None and w.proc.poll() is None and not w.killed_for_memory}
        for role, rss in self.memory.over(pids):
            w = self.workers[role]
            w.killed_for_memory = True
            w.memory_kills_total += 1
            self.log("worker over its memory limit; killing and restarting it", level="warning",
                     role=role, pid=w.proc.pid, anon_rss_mb=rss >> 20,
                     limit_mb=self.memory.limit >> 20)
            w.proc.kill()

    def _check_disks(self) -> None:
        """Each directory's state (bookie.core.diskcheck: ok / warn / full, with the
        low-water mark); what follows is the policy's (read-only while any is full, a GC pass
        with a major compaction asked for when one fills, again every gcWaitTime while full)."""
        conf = self.conf
        full, changed = diskcheck.check([*conf.journal_dirs, *conf.ledger_dirs], self.disk_states, conf,
                                        diskcheck.disk_usage)
        for d, state, used in changed:
            self.log(f"disk {state}", level="warning" if state != diskcheck.OK else None,
                     directory=d, used=f"{used:.3f}")
        with self._readonly_lock:  # read-only, and a GC pass asked for (core/supervision.py)
            self._carry_out(self.policy.handle(DisksFull(tuple(full)), time.monotonic()))

    def _take_signals(self) -> None:
        """Act on what the signal handlers noted (they only store attributes: a handler that
        logged, or waited on anything, could block or deadlock the thread it interrupted)."""
        if self.signalled_stop:
            self.request_stop(self.signalled_stop)
        flag, self.signalled_readonly = self.signalled_readonly, None
        if flag is not None:
            self.set_readonly(flag)
        if self.ring is not None and bool(self.ring.get(NO_ROOM)) != self.no_room:
            self._cause("no_room", not self.no_room)
        journal_full = any(r.get(JOURNAL_NO_ROOM) for r in self.rings)
        if journal_full != self.journal_full:
            self._cause("journal_full", journal_full)

    def set_readonly(self, flag: bool) -> None:
        """Force read-only mode, or lift the force (operators: SIGUSR1 / SIGUSR2, the admin
        API's PUT /api/v1/bookie/state/readonly; tests).  Safe from any thread."""
        self._cause("forced", flag)

    def _cause(self, cause: str, on: bool) -> None:
        """One cause of read-only set or lifted (core/supervision.py rule 4); the workers and the
        store are told when the answer changes."""
        with self._readonly_lock:
            self._carry_out(self.policy.handle(ReadOnlyCause(cause, on), time.monotonic()))

    def request_stop(self, reason: str, code: int = 0) -> None:
        if not self.stop_reason:  # a signal handler may have set ``stopping`` alone
            self.stopping = True
            self.stop_reason = reason
            self.exit_code = code
            self.log("stopping", reason=reason)

    # -- stop ------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop in order (module docstring), remove what the bookie made, release the
        directories.  Logs ``bookie stopped`` with the reason if anything had been started."""
        if self.started:
            self.notify(b"STOPPING=1")
        if self.registrar is not None:
            self.registrar.stop()
        if self.registration is not None:
            try:
                self.registration.close()
            except Exception as e:  # noqa: BLE001 - the store may be gone; stopping goes on
                self.log("unregister failed", error=str(e))
        for group in (("autorecovery", "read", "gc"), ("add",), self.journal_roles):
            procs = [self.workers[r].proc for r in group
                     if r in self.workers and self.workers[r].proc is not None]
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    wait_exited(p, 15)
                except subprocess.TimeoutExpired:
                    self.log("worker did not stop in 15 s; killing it", pid=p.pid)
                    p.kill()
                    p.wait()
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001
                pass
        for server in (self.http, self.admin_http):
            if server is not None:
                server.stop()
        for ring in self.rings:
            ring.close()  # the memfd: its memory goes with the workers' mappings
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        try:
            self.lock.set_runtime()  # nothing left for a successor to remove
        except OSError as e:
            self.log("could not update the directory lock", error=e.strerror)
        self.lock.release()
        if self.started:
            self.log("bookie stopped", reason=self.stop_reason)

    # -- HTTP: admin API and /metrics (bookie.appliance.admin) -----------------------------------
    def _start_http(self) -> None:
        from bookie.appliance import admin  # lazy: http.server

        conf = self.conf
        api = admin.AdminApi(self, self.metrics)
        limits = {"max_connections": conf.http_server_max_connections,
                  "idle_timeout_s": conf.http_server_idle_timeout_s,
                  "request_timeout_s": conf.http_server_request_timeout_s,
                  "max_per_peer": conf.http_server_max_connections_per_address,
                  "allowed_hosts": admin.allowed_hosts(conf)}
        try:
            limits["tls"] = admin.tls_context(conf)
        except ValueError as e:
            raise StartRefused(str(e)) from None
        try:
            if conf.metrics_port:
                self.http = admin.start_server(conf.listening_interface, conf.metrics_port, api,
                                               admin.METRICS_ROUTES, self.log, **limits)
            if conf.http_server_enabled:
                self.admin_http = admin.start_server(conf.http_server_host, conf.http_server_port,
                                                     api, admin.ROUTES, self.log,
                                                     token=self.admin_token, **limits)
        except OSError as e:
            raise StartRefused(f"cannot serve HTTP (prometheusStatsHttpPort={conf.metrics_port}, "
                               f"httpServerHost={conf.http_server_host}, httpServerPort="
                               f"{conf.http_server_port}): {e.strerror}") from None
        if self.admin_http is not None:
            self.log("admin api serving", host=conf.http_server_host, port=self.admin_http.port,
                     auth="bearer" if self.admin_token else "none")


def _with_port(conf: BookieConfig) -> BookieConfig:
    """``conf`` with ``bookiePort=0`` resolved: the port the directories were stamped with
    (the same bookie again), else a free pair of ports (a new bookie)."""
    if conf.bookie_port != 0:
        return conf
    values = conf.as_dict()
    values["bookiePort"] = remembered_port(all_dirs(conf)) or free_port_pair(conf.listening_interface)
    return BookieConfig(values, conf.warnings)


class _StopWhileChecking(BaseException):
    """A stop signal while the start only checks (``run_bookie``): BaseException, so no
    ``except Exception`` of a check swallows it."""


def run_bookie(conf: BookieConfig) -> int:
    """Run one bookie in the foreground until SIGTERM / SIGINT.  Returns the exit status:
    0 stopped on request; 2 refused to start (one log line, nothing registered or created);
    1 start or run failed; 3, 4 a worker's fatal status (``FATAL_EXITS``)."""
    name = f"bookie[{conf.bookie_port or 'new'}] supervisor"
    purpose = "start a second bookie on it"
    try:
        try:
            lock = DirectoryLock.acquire(all_dirs(conf), purpose=purpose)
        except DirectoryInUseError as e:
            if not e.holder_dead:
                raise
            log(name, "waiting for the directory lock", directory=e.directory, held_by=e.holder)
            lock = DirectoryLock.acquire(all_dirs(conf), purpose=purpose,
                                         wait_for_dead_holder_s=DEAD_HOLDER_WAIT_S)
    except LayoutError as e:
        log(name, "refusing to start", reason=str(e))
        return EXIT_REFUSED
    try:
        conf = _with_port(conf)
    except (LayoutError, RuntimeError) as e:
        lock.release()
        log(name, "refusing to start", reason=str(e))
        return EXIT_REFUSED
    for w in conf.warnings:
        log(f"bookie[{conf.bookie_port}] supervisor", "warning", message=w)
    sup = Supervisor(conf, lock)

    checking = [False]  # inside sup.start(), before anything is written (see on_signal)

    def on_signal(signo, _frame):
        # Attribute stores only (Supervisor._take_signals); ``stopping`` also ends a start.
        sup.signalled_stop = f"signal {signal.Signals(signo).name}"
        sup.stopping = True
        # Until the metadata store is open the start has only checked and read: a stop then
        # breaks off at once. Opening a ZooKeeper store out of reach waits zkTimeout (30 s
        # and more), and a stop noted only as a flag waited that long (issue 35).
        if checking[0] and sup.store is None and sup.conf.metadata_uri and not sup.started:
            checking[0] = False
            raise _StopWhileChecking

    def on_readonly(signo, _frame):
        sup.signalled_readonly = signo == signal.SIGUSR1

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, on_readonly)
    signal.signal(signal.SIGUSR2, on_readonly)
    try:
        try:
            checking[0] = True
            sup.start()
        finally:
            checking[0] = False
    except _StopWhileChecking:
        sup.stop_reason = sup.signalled_stop
        sup.log("stopping", reason=f"{sup.signalled_stop} during the start checks")
        sup.shutdown()
        return 0
    except (StartRefused, LayoutError) as e:
        return _start_ended(sup, "refusing to start", str(e), "start refused", EXIT_REFUSED)
    except WorkerStartError as e:
        if sup.stopping and sup.exit_code == 0:  # a signal asked us to stop while starting
            sup.request_stop(sup.signalled_stop or "signal")
            sup.shutdown()
            return 0
        code = e.returncode if e.returncode in FATAL_EXITS else 1
        return _start_ended(sup, "start failed", str(e), "start failed", code)
    except OSError as e:  # no memory for the ring, no disk for the run directory
        return _start_ended(sup, "start failed", f"{e.filename or ''}: {e.strerror}".lstrip(": "),
                            "start failed", 1)
    except Exception as e:  # noqa: BLE001 - whatever it is, one line, and undo what was made
        return _start_ended(sup, "start failed", f"{type(e).__name__}: {e}", "start failed", 1)
    return sup.watch()


def _start_ended(sup: Supervisor, event: str, reason: str, stop_reason: str, code: int) -> int:
    """Say in one line why the start ended, undo what it made, and return the exit status."""
    sup.log(event, reason=reason)
    sup.stop_reason = stop_reason
    sup.shutdown()
    return code
