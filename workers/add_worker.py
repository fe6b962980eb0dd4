"""The add worker: owns the client-facing add socket, the entry logs and the index writes.

This module is the loop: it turns sockets, rings and timers into calls of the add machine
(``bookie.core.adds``: which request is decided now and which waits, for its owner lookup or for
its journal's ring room; write-once; the no-room state; the refusals) and of the ledger rule book
(``bookie.core.ledgers``), and their answers into sends and ring writes.

Per loop iteration (everything batched; no per-entry Python work on the hot path):

0. Wait (``wait``): while answers wait on a journal, with ``idleSpinMicros`` set, look at the
   DURABLE cursors and the sockets without sleeping for that long first (core/idle.py).
1. Answer the adds whose records the journal has made durable (DURABLE passed their end).
   Their index entries were committed in an earlier iteration, so an acknowledged entry is
   readable by the read worker from the moment its ack leaves (read-after-ack).
2. Take every request waiting on the add socket and the control socket (fences from the read
   worker).  Check its frames here (header, sizes, ids, read-only) and ask the ledger table
   (``bookie.core.ledgers``: master key, fenced) whether it may go; place each accepted one
   once in the shared-memory ring as a record, apply that record to the table.  The journal is
   woken as soon as the iteration's first record is placed (its write and fdatasync overlap the
   rest of this iteration), and once more at the end if more records followed; a DEFERRED_SYNC
   add's record wakes nobody (no answer waits for its sync: it goes with the next record that
   does, a FORCE_LEDGER, a full ring, or the journal's own poll timeout).
3. Append the same ring bytes to the entry log and commit their index locations in one LMDB
   write transaction.
   Then tell the read worker which ledgers moved (``publish_moved``): their parked long polls
   are answered from that commit, without waiting for the journal (docs/architecture.md); only
   while it has polls parked (``news_on``: core/long_polls.py ``WakeNews``).  DEFERRED_SYNC
   adds are answered right after this commit (stored), not waiting for DURABLE.
4. Every ``flushInterval``: checkpoint = fdatasync entry logs, sync the index, then persist
   LastLogMark = min(WRITE, DURABLE) (DESIGN invariant 3): every record placed before WRITE
   is in the entry log and, once the iteration's commit ran, in the index.

Start-up: wait until the journal has made durable whatever a previous add worker placed (the
supervisor restarts a journal that dies meanwhile; a SIGTERM ends the wait), replay the journal
from LastLogMark into entry log and index (``bookie.storage.journal_replay``: the same ``apply``
per record as the live path), checkpoint, then serve.

Several journals (``journalDirectories``, bookie.storage.journal_set): one ring per journal, and
every record of a ledger goes to journal ``journal_of(ledger_id)``'s ring.  Cursors, ``safe_to``,
marks and answers are per journal (each journal has its own logical offsets): an answer waits
for its own journal's DURABLE only (``JournalAnswers``: a queue per journal), and a full ring
stalls only its own journal's requests (``bookie.core.adds`` invariant 2); a checkpoint persists one LastLogMark per journal; start-up
replays each journal from its own mark (a ledger's records are all in one journal, so the order
the journals are replayed in does not matter).  Ring 0 also carries the control words
(READONLY, NO_ROOM, ADD_EPOCH).
"""

from __future__ import annotations

import collections
import os
import time

import zmq

from bookie import wire, wire_sockets
from bookie.metadata.recovery_secret import read_secret_file
from bookie.storage.layout import current_dir, key_salt
from bookie.wire import Op, Status
from bookie.storage import records
from bookie.core.answers import JournalAnswers, Pending
from bookie.core.idle import PARK, YIELD, Backoff
from bookie.core.long_polls import SUBSCRIBE, SUBSCRIBED, UNSUBSCRIBE
from bookie.workers.auth import server_curve
from bookie.workers.client_sockets import (REFUSALS_PER_CONNECTION_PER_S, ConnectionCap,
                                           RefusalBudget, guard_client_socket, make_socket)
from bookie.workers.common import ClientServer
from bookie.storage.checkpoint import Checkpointer, checkpoint
from bookie.workers.add_owners import OwnerWaits
from bookie.workers.add_quotas import QuotaPasses
from bookie.workers.claims import OwnerLookup, OwnerResolver
from bookie.workers.frame_guard import FrameGuard
from bookie.storage.journal_replay import replay
from bookie.core.adds import WAIT, AddMachine, NoRoom, ReadOnly, RoomAgain
from bookie.core.ledgers import Rejected
from bookie.storage.noroom import RETRY_S, Held, HeldRecord, no_room
from bookie.storage.trace import ADD_FILE, AddTrace, open_trace
from bookie.storage.ring import (ADD_EPOCH, DURABLE, JOURNAL_NO_ROOM, NO_ROOM, READONLY, WRITE, Doorbell,
                                 Ring)
from bookie.storage.journal_set import bell_name, journal_of
from bookie.core.shares import principal_of
from bookie.storage.entrylog import EntryLogs
from bookie.storage.index import Index, open_index
from bookie.storage.ledger_storage import LedgerStorage

MAX_MESSAGES_PER_ITERATION = 512
# plain ints: ``get(zmq.EVENTS) & zmq.POLLIN`` goes through IntEnum/IntFlag objects, 5.6 us a
# loop against 1.9 us (python -m timeit, this machine)
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
FENCE_OP = -1  # a fence journaled for the read worker (bookie_requests_total{op="FENCE"})


def run(ctx) -> int:
    conf = ctx.conf
    jdirs = [current_dir(d) for d in conf.journal_dirs]
    ledger_dirs = [current_dir(d) for d in conf.ledger_dirs]
    index_dir = current_dir(conf.index_dirs[0])
    rings = [Ring.attach(a) for a in ctx.ring_paths]
    if len(rings) != len(jdirs):
        ctx.log("rings and journal directories differ in number", rings=len(rings), journals=len(jdirs))
        return 1
    ring = rings[0]  # also the control words
    ring.set(ADD_EPOCH, ring.get(ADD_EPOCH) + 1)

    # A previous add worker may have placed records the journals have not written yet.  A
    # journal that died meanwhile is restarted by the supervisor during this wait (dependency
    # order); a SIGTERM ends it at once.
    deadline = time.monotonic() + 60
    if any(r.get(DURABLE) < r.get(WRITE) for r in rings):
        ctx.log("waiting for the journals to drain the ring")
    while any(r.get(DURABLE) < r.get(WRITE) for r in rings):
        if ctx.stopping:
            ctx.log("stopped while waiting for the journals to drain the ring")
            return 0
        if any(r.get(JOURNAL_NO_ROOM) for r in rings):
            deadline = time.monotonic() + 60  # a journal disk with no room: waits for room
        elif time.monotonic() > deadline:
            ctx.log("journal did not drain the ring in 60 s; giving up")
            return 1
        ctx.pause(0.01)

    env = open_index(index_dir, conf.index_map_size_bytes)
    index = Index(env)
    logs = EntryLogs(ledger_dirs, conf.log_size_limit_bytes, conf.entry_log_preallocation, index)
    salt = key_salt(conf)
    while True:
        storage = LedgerStorage(index, logs, salt)  # a fresh table for each attempt
        try:
            replay(ctx.log, [r.get(DURABLE) for r in rings], storage, jdirs, ledger_dirs)
            break
        except Exception as e:  # noqa: BLE001 - only want of space is waited out
            if not no_room(e):
                raise
            if ctx.stopping:  # replay redoes it all at the next start
                ctx.log("stopped while waiting for room to replay the journal", error=str(e))
                return 0
            ctx.log("no room on the ledger disks to replay the journal; retrying", error=str(e))
            ctx.pause(RETRY_S)  # a SIGTERM ends the wait

    storage.table.recovery_secret = read_secret_file(ctx.run_dir)  # None: flag refused
    ring.set(NO_ROOM, 0)  # a predecessor may have died with no room; this one starts writable
    curve = server_curve(conf)  # before the context: a bad key file stops the worker here
    zctx = zmq.Context()
    if curve:
        curve.start(zctx, ctx.log)
    clients = make_socket(zctx, zmq.ROUTER, linger_ms=1000)
    if curve:
        curve.secure(clients)
    clients.setsockopt(zmq.ROUTER_MANDATORY, 0)
    clients.setsockopt(zmq.RCVHWM, 10_000)
    clients.setsockopt(zmq.SNDHWM, 100_000)
    guard_client_socket(clients, conf, conf.max_add_message_size_bytes)
    cap = ConnectionCap(clients, conf.max_client_connections, conf.bookie_port)
    clients.bind(f"tcp://{conf.listening_interface}:{conf.bookie_port}")
    cap.local_path = curve.bind_local(clients, "add", conf.bookie_port)  # same-host clients
    control = make_socket(zctx, zmq.ROUTER)
    control.bind(ctx.endpoint("add.ctl"))
    durable_in = Doorbell(os.path.join(ctx.run_dir, "add.bell"))  # rung by the journal after each group
    # journal i's doorbell, rung here after placing records in its ring
    wakes = [Doorbell(os.path.join(ctx.run_dir, bell_name(i))) for i in range(len(rings))]
    lac_pub = make_socket(zctx, zmq.PUB)
    lac_pub.bind(ctx.endpoint("add.lac"))

    server = AddServer(ctx, rings, storage, clients, control, wakes, lac_pub, ledger_dirs)
    server.machine = AddMachine(storage.table, len(rings), conf.max_pending_adds,
                                conf.max_entry_size_bytes, RETRY_S)
    server.cap = cap
    server.frame_guard = FrameGuard(cap, conf.max_add_message_size_bytes, ctx.run_dir, ctx.log)
    server.gate = curve.gate if curve else None
    trace_file = open_trace(conf.add_trace_dir, ADD_FILE)  # bench bookie --trace; None: off
    server.trace = AddTrace(trace_file) if trace_file else None
    # who owns an id the bookie holds nothing for: asked before anything is stored, and keys
    # verified against the owner's check, both off this loop (claims.py)
    server.owners = OwnerResolver(OwnerLookup(conf.metadata_uri, conf.zk_security, ctx.log,
                                              bookie_id=conf.bookie_id))
    storage.table.verify = server.owners.verified
    # one principal holds at most a share of the pending adds; flooding connections are shut
    server.refusals = RefusalBudget(REFUSALS_PER_CONNECTION_PER_S, cap, server.log_shut)
    server.pending = JournalAnswers(len(rings), conf.max_pending_adds, principal_of(curve.enrolled),
                                    server.refusals)
    server.machine.answers = server.pending
    server.quota_start(conf.ledger_storage_quota_bytes, index_dir, bool(curve) and curve.enrolled)
    ctx.log("add worker ready", port=conf.bookie_port, position=ring.get(WRITE))
    ctx.ready()
    try:
        server.serve(durable_in)
    finally:
        server.shutdown()
        server.quota_close()
        server.frame_guard.close()
        server.owners.close()
        if server.trace is not None:
            server.trace.close()
        storage.close()
        for s in (cap, clients, control, durable_in, *wakes, lac_pub):
            s.close()
        if curve:
            curve.stop()
        zctx.term()
        logs.close()
        env.close()
    ctx.log("add worker stopped", entries=storage.entries_total)
    return 0


class AddServer(OwnerWaits, QuotaPasses, ClientServer):
    def __init__(self, ctx, rings, storage, clients, control, wakes, lac_pub, ledger_dirs):
        super().__init__(ctx, clients, rings[0], ledger_dirs[0])
        self.conf = ctx.conf
        self.storage = storage
        self.control = control
        self.rings = rings  # journal i's at [i]; self.ring is rings[0] (control words)
        self.journals = len(rings)
        self.wakes = wakes
        self.lac_pub = lac_pub
        self.ledger_dirs = ledger_dirs
        self.pending: JournalAnswers | None = None  # set by run(): needs the refusal budget
        self.machine: AddMachine | None = None  # set by run(): every add decision (core/adds.py)
        self.last_mark = [r.get(WRITE) for r in rings]
        self.last_checkpoint = time.monotonic()
        self.last_stats = 0.0
        self.gate = None  # workers/auth.py Gate when CURVE is on
        self.owners: OwnerResolver | None = None  # workers/claims.py
        self.current = None  # (socket, frames, internal, taken_at) of the message being handled
        self.no_room_in = 0  # the journal whose ring had no room for the message just handled
        self.checkpointer = Checkpointer(ctx, storage, ledger_dirs)
        self.add_latency = ctx.metrics.histogram("bookie_add_entry_seconds")
        self.taken_at = 0.0  # when the message being handled was taken off its socket
        # per journal: end of what is in the entry log and index (noroom.py)
        self.safe_to = [r.get(WRITE) for r in rings]
        self.held: collections.deque[Held] = collections.deque()
        self.cap = None  # ConnectionCap of the client socket
        self.frame_guard = None  # workers/frame_guard.py: messages still arriving, per connection
        self.rung: set[int] = set()  # journals woken this iteration
        self.unrung: set[int] = set()  # ... and placed in since
        self.moved: set[int] = set()  # ledgers with adds / WRITE_LACs placed since the last publish
        self.deferred_waiting = False  # a DEFERRED_SYNC add's answer was held this iteration
        self.news_on = True  # tell the read worker which ledgers moved (core/long_polls.py WakeNews)
        self.lac_taken = False  # a WRITE_LAC was placed: ``take`` ends the iteration after it
        self.trace: AddTrace | None = None  # per-add timestamps (addTraceDirectory); None: off
        self.idle = Backoff(self.conf.idle_spin_s)  # while answers wait on a journal (core/idle.py)
        self.load_seen_at = float("-inf")  # when the host's load average was last given to ``idle``
        self.cores = len(os.sched_getaffinity(0))

    # -- the loop --------------------------------------------------------------------------------
    def serve(self, durable_in) -> None:
        poller = zmq.Poller()
        poller.register(durable_in.fileno(), zmq.POLLIN)
        poller.register(self.clients, zmq.POLLIN)
        poller.register(self.control, zmq.POLLIN)
        if self.cap is not None:
            poller.register(self.cap.monitor, zmq.POLLIN)
        poller.register(self.owners.fileno(), zmq.POLLIN)
        poller.register(self.ctx.signal_fd, zmq.POLLIN)  # a SIGTERM ends the wait at once
        flush_s = self.conf.flush_interval_s
        while not self.ctx.stopping:
            events = self.wait(poller, 5 if self.pending else 50)
            if self.ctx.signal_fd in events:
                self.ctx.drain_signals()
            if durable_in.fileno() in events:
                durable_in.drain()
            if self.cap is not None and self.cap.monitor in events:
                self.cap.drain()
            self.answer_durable()
            self.rung, self.unrung = set(), set()
            if self.owners.fileno() in events:
                self.resume(self.owners.drain())
            self.retry_stalled()
            if not self.machine.all_stalled():  # a full ring holds back its own journal only
                if self.control in events:
                    self.take(self.control, internal=True)
                if self.clients in events:
                    self.take(self.clients, internal=False)
            for j in self.unrung:
                self.wakes[j].ring()
            self.commit()
            self.quota_pass()
            if self.deferred_waiting:  # stored now: deferred adds go without waiting for a poll
                self.deferred_waiting = False
                self.answer_durable()
            if self.frame_guard is not None:  # drained: no whole message left in ZeroMQ's queue
                self.frame_guard.check(not self.machine.all_stalled()
                                       and not self.clients.get(_EVENTS) & _POLLIN)
            now = time.monotonic()
            if now - self.last_checkpoint >= flush_s:
                self.checkpoint(now)
            if now - self.last_stats >= 1.0:
                self.publish_stats(now)

    def wait(self, poller, timeout_ms: int) -> dict:
        """The loop's wait for its sockets, doorbells and signals (their events, by socket).

        While answers wait on a journal (``pending``) and ``idleSpinMicros`` is set, look again
        without sleeping for that long first (core/idle.py): the journal's DURABLE cursor in
        shared memory, and the sockets with a poll that does not block.  An answer due is then
        sent without this process being woken; ``{}`` when only a DURABLE moved."""
        idle = self.idle
        if not idle or not self.pending:
            return dict(poller.poll(timeout_ms))
        now = time.perf_counter()
        if now - self.load_seen_at >= 1.0:
            self.load_seen_at = now
            idle.observe_load(os.getloadavg()[0], self.cores)
        seen = self.durables()
        idle.start(now)
        while True:
            events = dict(poller.poll(0))
            if events:
                return events
            step = idle.step(time.perf_counter())
            if step == PARK:
                return dict(poller.poll(timeout_ms))
            if step == YIELD:
                os.sched_yield()
            if self.durables() != seen:
                return {}

    def shutdown(self) -> None:
        """Stop taking requests; answer what the journal makes durable; final checkpoint."""
        self.clients.setsockopt(zmq.LINGER, 1000)
        deadline = time.monotonic() + 10
        durable, progress_at = self.durables(), time.monotonic()
        while self.pending and time.monotonic() < deadline:
            self.answer_durable()
            time.sleep(0.002)
            now_durable = self.durables()
            if now_durable != durable:
                durable, progress_at = now_durable, time.monotonic()
            elif time.monotonic() - progress_at > 1.0:
                break  # the journal is not making progress (stopped or failed): do not wait on it
        self.commit(final=True)
        self.checkpointer.stop()
        try:
            if not self.machine.full:
                checkpoint(self.storage, self.ledger_dirs, self.mark())
        except Exception as e:  # noqa: BLE001 - replay from the older LastLogMark redoes it
            if not no_room(e):
                raise
            self.ctx.log("final checkpoint failed: no room", error=str(e))

    def checkpoint(self, now: float) -> None:
        """Start a checkpoint in the background (syncs must not stall the add path).

        The mark is fixed now, after this iteration's index commit: everything before it is
        already written to the entry log and committed to the index; the thread only syncs.
        """
        self.last_checkpoint = now
        mark = self.mark()
        if (mark == self.last_mark and not self.checkpointer.failed) or self.checkpointer.busy():
            return
        self.checkpointer.request(mark)
        self.last_mark = mark
        self.stats["checkpoints_total"] += 1

    def publish_stats(self, now: float) -> None:
        self.last_stats = now
        s = dict(self.stats)
        s["add_pending"] = len(self.pending)
        if self.cap is not None:
            s["connections_open"] = len(self.cap.open)
            s["connections_refused_total"] = self.cap.refused_total
        s["ring_free_bytes"] = min(r.free_bytes() for r in self.rings)
        s["entries_stored_total"] = self.storage.entries_total
        self.quota_stats(s)
        self.ctx.write_stats(s)

    def answer_durable(self) -> None:
        if not self.pending:
            return
        # Each journal's answers go in its own order, as soon as that journal made them durable.
        now = time.monotonic()
        for p in self.machine.due(self.durables(), self.safe_to):
            self.count(p.op, p.status)
            if p.op == Op.ADD:
                self.add_latency.observe(now - p.taken_at)
            sock = self.control if p.reply[0] is None else self.clients
            frames = p.reply[1:] if p.reply[0] is None else p.reply
            if self.trace is not None:
                self.trace.replied(p.end, time.monotonic_ns())
            try:
                wire_sockets.send_frames(sock, frames)
            except zmq.ZMQError:
                self.stats["replies_dropped_total"] += 1

    def publish_moved(self, gone: set[int]) -> None:
        """Tell the read worker which ledgers moved, as soon as their index commit ran (not when
        the journal made them durable): the LAC an add carries speaks of entries its writer had
        acknowledged by Qa bookies already, which is true whether or not this bookie has synced
        (or even holds) them.  A parked long poll then gets what a plain READ_LAC would answer
        now; a reader finds each entry up to it on a bookie that acknowledged it (reader.py moves
        on from NO_ENTRY).  ``gone``: ledgers the GC deleted, whose polls get NO_LEDGER."""
        if self.news_on:  # only while the read worker has polls parked (core/long_polls.py)
            for lid in self.moved | gone:
                self.lac_pub.send(wire.LEDGER_ID.pack(lid))
        self.moved.clear()

    def retry_stalled(self) -> None:
        """Decide again each journal's stalled requests, first first, while its ring has room
        (core/adds.py invariant 1)."""
        machine = self.machine
        if not machine.stalled_count:
            return
        for journal in range(self.journals):
            while True:
                waiting = machine.next_stalled(journal)
                if waiting is None:
                    break
                sock, frames, internal, self.taken_at = waiting
                if not self.handle(sock, frames, internal, first_stalled=True):
                    machine.stall(journal, waiting, again=True)
                    break

    def take(self, sock, internal: bool) -> None:
        self.lac_taken = False
        machine = self.machine
        for _ in range(MAX_MESSAGES_PER_ITERATION):
            try:
                frames = wire_sockets.recv_frames(sock, copy=False)
            except zmq.Again:
                break
            self.taken_at = time.monotonic()
            if not internal and self.frame_guard is not None:
                self.frame_guard.delivered(frames)
            if not self.handle(sock, frames, internal):
                # its journal's ring is full: it waits there; other journals' requests go on
                machine.stall(self.no_room_in, self.current)
                if machine.all_stalled():
                    break
            if self.lac_taken:
                # A WRITE_LAC ends the iteration: its commit and the long polls it wakes then
                # come now, not after up to MAX_MESSAGES_PER_ITERATION queued adds (a LAC
                # notice exists to overtake those: client/protocol/writer.py ``_notice``).
                self.lac_taken = False
                break

    # -- one request -----------------------------------------------------------------------------
    def handle(self, sock, frames, internal: bool, first_stalled: bool = False) -> bool:
        """Handle one message; False when its journal's ring is full (``no_room_in`` says
        which: the caller stalls it there).  ``first_stalled``: it is its journal's first
        stalled message, decided again (core/adds.py ``arrive``)."""
        self.current = (sock, frames, internal, self.taken_at)
        if internal:
            return self.handle_control(frames, first_stalled)
        if len(frames) < 2:
            self.stats["dropped_malformed_total"] += 1
            return True
        ident = frames[0].bytes
        head = frames[1].bytes
        try:
            op, flags, request_id, ledger_id = wire.unpack_header(head)
            wire.check_request_flags(op, flags)
        except wire.ProtocolError as e:
            self.reject_raw(ident, head, e.status)
            return True
        try:
            if self.gate is not None and self.gate.refusal(frames[1], op, flags):
                raise Rejected(Status.UNAUTHORIZED, "role does not allow the op")
            # past its principal's share: TOO_MANY_REQUESTS
            journal = self.journal_of(ledger_id)
            self.pending.admit(journal, frames[1], ident, op)
            if op == Op.ADD or op == Op.WRITE_LAC or op == Op.FORCE_LEDGER:
                # behind a request of its ledger or journal that waits (core/adds.py inv. 1)
                if self.machine.arrive(ledger_id, journal, self.current, first_stalled) == WAIT:
                    return True
            if op == Op.ADD:
                return self.handle_add(ident, flags, request_id, ledger_id, frames[2:])
            if op == Op.WRITE_LAC:
                return self.handle_write_lac(ident, request_id, ledger_id, frames[2:])
            if op == Op.FORCE_LEDGER:
                return self.handle_force(ident, request_id, ledger_id, frames[2:])
            if op == Op.INFO:
                self.reply(ident, op, Status.OK, request_id, ledger_id, [self.info()])
                return True
            raise Rejected(Status.BAD_REQUEST, f"op {Op(op).name} goes to the read socket")
        except (Rejected, wire.ProtocolError) as e:
            self.stats[f"rejected_{e.status.name.lower()}_total"] += 1
            if not self.flooding(ident, frames[1], e.status):  # over its budget: shut, unanswered
                self.reply(ident, op, e.status, request_id, ledger_id)
            return True
        except OSError:
            raise  # a failing disk under the add path is the supervisor's to handle
        except Exception as e:  # an input nobody foresaw must not take the add path down
            self.stats["internal_errors_total"] += 1
            self.ctx.log("request failed", op=Op(op).name, ledger=ledger_id, error=repr(e))
            self.reply(ident, op, Status.BAD_REQUEST, request_id, ledger_id)
            return True

    def durables(self) -> list[int]:
        return [r.get(DURABLE) for r in self.rings]

    def journal_of(self, ledger_id: int) -> int:
        """The journal (and ring) of every record of ``ledger_id`` (journal_set invariant 1)."""
        return journal_of(ledger_id, self.journals)

    def room_for(self, journal: int, size: int) -> bool:
        ring = self.rings[journal]
        if size > ring.capacity:
            raise Rejected(Status.BAD_REQUEST, "request larger than the journal ring")
        if ring.free_bytes() >= size:
            return True
        self.wakes[journal].ring()  # room comes as the journal writes: deferred records may be unrung
        return False

    def place(self, journal: int, parts, wake: bool = True) -> tuple[int, int]:
        """Copy a record into journal ``journal``'s ring and publish it; returns its logical
        (start, end) in that journal's offsets.  ``wake=False``: nobody waits for this record's
        sync (a DEFERRED_SYNC add's), so the journal is not woken for it; it writes the record
        with the next one that wakes it (a normal add, a FORCE_LEDGER, a full ring) or at its
        own poll timeout (0.1 s), and the add path spares a process wake-up on a core it shares."""
        ring = self.rings[journal]
        start = ring.get(WRITE)
        end = ring.put(start, parts)
        ring.set(WRITE, end)
        if not wake:
            return start, end
        # Wake the journal at the first record of an iteration, before this record goes to the
        # entry log and the index (its fdatasync then overlaps that work: a lone add's
        # latency); records placed after that ring once more at the end of the iteration.
        if journal in self.rung:
            self.unrung.add(journal)
        else:
            self.wakes[journal].ring()
            self.rung.add(journal)
        return start, end

    def mark(self) -> list[int]:
        """Each journal's LastLogMark a checkpoint may persist now.  Call after
        ``storage.commit()``: every record placed before WRITE is then in the entry log and the
        index, and a mark never passes what its journal made durable (a journal must never
        restart below it)."""
        return [min(s, d) for s, d in zip(self.safe_to, self.durables())]

    # -- no room on the ledger disks (storage/noroom.py) -----------------------------------------
    def commit(self, final: bool = False) -> None:
        """Commit the index; on want of space turn read-only, and retry while read-only."""
        now = time.monotonic()
        if not self.machine.commit_due(now, final):
            return
        try:
            while self.held:
                self.held[0].store(self.storage)
                self.held.popleft()
            gone = self.storage.commit()
        except Exception as e:  # noqa: BLE001 - only want of space is survived
            if not no_room(e):
                raise
            self.turn_full(e)
            return
        if gone:
            self.machine.deleted(gone)
        self.safe_to = [r.get(WRITE) for r in self.rings]
        if self.moved or gone:
            self.publish_moved(gone)
        if self.checkpointer.no_room:
            self.turn_full(None)
        elif self.machine.full and not self.checkpointer.failed:
            self.act(self.machine.handle(RoomAgain(), now))

    def turn_full(self, e) -> None:
        self.act(self.machine.handle(NoRoom(), time.monotonic()),
                 error=str(e) if e else "checkpoint failed")

    def act(self, actions, error: str = "") -> None:
        """Carry out the machine's actions about the bookie's state (core/adds.py)."""
        for a in actions:
            if type(a) is ReadOnly:
                self.ring.set(NO_ROOM, 1 if a.on else 0)  # the supervisor turns the bookie read-only
                if a.on:
                    self.ctx.log("no room on the ledger disks; read-only until there is", error=error)
                else:
                    self.ctx.log("ledger disks have room again; taking adds",
                                 position=",".join(map(str, self.safe_to)))

    def store(self, ledger_id, start, end, size, data_offset, entry_ids, lengths, offsets) -> None:
        """Write a placed record to the entry log, or hold it while there is no room."""
        slices = self.rings[self.journal_of(ledger_id)].slices(start, end)
        if not self.held:
            try:
                self.storage.store_batch(ledger_id, slices, size, data_offset, entry_ids,
                                         lengths, offsets)
                return
            except Exception as e:  # noqa: BLE001 - only want of space is survived
                if not no_room(e):
                    raise
                self.turn_full(e)
        self.held.append(Held(ledger_id, slices, size, data_offset, entry_ids, lengths, offsets))

    def store_record(self, ledger_id: int, rec: bytes) -> None:
        """Write a placed FENCE or LAC record to the entry log, or hold it while there is no
        room (in order with the held adds: storage/noroom.py)."""
        if not self.held:
            try:
                self.storage.store_record(ledger_id, rec)
                return
            except Exception as e:  # noqa: BLE001 - only want of space is survived
                if not no_room(e):
                    raise
                self.turn_full(e)
        self.held.append(HeldRecord(ledger_id, rec))

    def handle_add(self, ident, flags, request_id, ledger_id, body) -> bool:
        if len(body) != 3:
            raise Rejected(Status.BAD_REQUEST, "ADD takes master key, lengths and data frames")
        machine = self.machine
        recovery = bool(flags & wire.Bits.RECOVERY_ADD)
        # a recovery add of entries held already is answered while read-only (core/adds.py inv. 5)
        refusal = machine.check_writable(self.ring.get(READONLY), len(self.pending), recovery)
        key = body[0].bytes
        lengths_frame = body[1].buffer
        data = body[2].buffer
        lengths, offsets = wire.batch_offsets(lengths_frame, len(data), machine.max_entry_bytes)
        ledgers, entry_ids = wire.batch_ids(data, offsets)
        machine.check_batch(ledger_id, ledgers, entry_ids)
        credential = bool(flags & wire.Bits.RECOVERY_CREDENTIAL)
        if self.park(ledger_id, key, credential) or self.unnamed(ledger_id, recovery, credential):
            return True
        placed = machine.decide_add(ledger_id, key, recovery, credential, self.owner_of(ledger_id))
        table = self.storage.table
        journal = self.journal_of(ledger_id)
        held = self.storage.held_entries(ledger_id, entry_ids)
        if held:  # entries are write-once (core/adds.py invariant 4)
            lengths_frame, data, lengths, offsets, entry_ids = machine.write_once(
                held, lengths_frame, data, lengths, offsets, entry_ids)
            if not len(entry_ids):  # all held, identical: stored nothing; answered in order
                end = machine.duplicate_answer(self.rings[journal].get(WRITE), self.safe_to[journal],
                                               self.storage.uncommitted(ledger_id))
                self.pending.append(Pending(end, [ident, wire.pack_header(
                    Op.ADD, Status.OK, request_id, ledger_id)], ledger_id, Op.ADD, self.taken_at,
                    journal))
                self.stats["add_duplicates_total"] += len(held)
                return True
        if refusal is not None:  # a recovery add that would store something
            raise Rejected(refusal)
        quota = machine.quotas.limit_bytes  # ledgerStorageQuotaBytes (core/adds.py invariant 8)
        if quota:
            principal, nbytes = self.quota_principal(), int(lengths.sum())
            exempt = self.recovery_principal(credential, principal)
            info = table.get(ledger_id)
            machine.check_quota(ledger_id, recovery, exempt, principal, nbytes,
                                fenced=info is not None and info.fenced)
        parts, size, data_offset = records.add_batch_parts(ledger_id, placed.key, lengths_frame, data,
                                                           flags=placed.flags)
        if not self.room_for(journal, size):
            self.no_room_in = journal
            return False
        checked_ns = time.monotonic_ns() if self.trace is not None else 0
        # answered once stored (core/adds.py invariant 6): no journal wake-up for it, unless
        # read-only, where its answer waits for durable as a normal add's does
        deferred = bool(flags & wire.Bits.DEFERRED_SYNC)
        start, end = self.place(journal, parts, wake=not deferred or machine.full)
        if self.trace is not None:
            self.trace.placed(end, ledger_id, int(entry_ids[0]), self.taken_at, checked_ns)
        table.apply(records.Record(records.ADD_BATCH, placed.flags, ledger_id, placed.key, -1,
                                   lengths, data_offset, size))
        self.store(ledger_id, start, end, size, data_offset, entry_ids, lengths, offsets)
        if quota:
            machine.placed(ledger_id, principal, nbytes, exempt)
        self.moved.add(ledger_id)
        self.deferred_waiting |= deferred
        self.pending.append(Pending(end, [ident, wire.pack_header(Op.ADD, Status.OK, request_id, ledger_id)],
                                    ledger_id, Op.ADD, self.taken_at, journal, deferred))
        self.stats["add_entries_total"] += len(entry_ids)
        self.stats["add_bytes_total"] += len(data)
        self.stats["add_requests_total"] += 1
        return True

    def handle_write_lac(self, ident, request_id, ledger_id, body) -> bool:
        if len(body) != 2 or len(body[1]) != wire.WRITE_LAC_BODY.size:
            raise Rejected(Status.BAD_REQUEST, "WRITE_LAC takes master key and lac frames")
        key = body[0].bytes
        (lac,) = wire.WRITE_LAC_BODY.unpack(body[1].bytes)
        placed = self.machine.decide_write_lac(ledger_id, key, lac)
        rec = records.lac_record(ledger_id, lac, placed.key, placed.flags)
        journal = self.journal_of(ledger_id)
        if not self.room_for(journal, len(rec)):
            self.no_room_in = journal
            return False
        _, end = self.place(journal, [rec])
        if self.storage.table.apply(records.parse(rec, 0)):
            self.store_record(ledger_id, rec)
        self.moved.add(ledger_id)
        self.lac_taken = True
        self.pending.append(Pending(end, [ident, wire.pack_header(Op.WRITE_LAC, Status.OK, request_id, ledger_id)],
                                    ledger_id, Op.WRITE_LAC, self.taken_at, journal))
        return True

    def handle_force(self, ident, request_id, ledger_id, body) -> bool:
        """FORCE_LEDGER: answered once its journal made durable everything placed so far (every
        record of the ledger before it among them: core/adds.py invariant 6).  Places nothing."""
        if body:
            raise Rejected(Status.BAD_REQUEST, "FORCE_LEDGER takes no body")
        journal = self.journal_of(ledger_id)
        self.pending.append(Pending(self.rings[journal].get(WRITE), [ident, wire.pack_header(
            Op.FORCE_LEDGER, Status.OK, request_id, ledger_id)], ledger_id, Op.FORCE_LEDGER,
            self.taken_at, journal))
        self.unrung.add(journal)  # the deferred records before it were placed without a wake-up
        return True

    def handle_control(self, frames, first_stalled: bool = False) -> bool:
        """Fence requests from the read worker: [ident, b"F", ledger_id, master_key, token]
        (b"C": the key is the ledger's recovery credential; returns stored form, b"": unbound).

        Each is answered on its own, [ident, b"F", token, status]: fences of one ledger with
        different keys get different answers.
        """
        if len(frames) in (2, 3) and frames[1].bytes in (SUBSCRIBE, UNSUBSCRIBE):
            # taken in this loop's order with the commits: the ordering argument of
            # core/long_polls.py WakeNews needs the answer to leave after every earlier commit
            self.news_on = frames[1].bytes == SUBSCRIBE
            if self.news_on and len(frames) == 3:
                self.control.send_multipart([frames[0].bytes, SUBSCRIBED, frames[2].bytes])
            return True
        if len(frames) != 5 or frames[1].bytes not in (b"F", b"C") or len(frames[2]) != wire.LEDGER_ID.size:
            self.stats["dropped_malformed_total"] += 1
            return True
        ident = frames[0].bytes
        (ledger_id,) = wire.LEDGER_ID.unpack(frames[2].bytes)
        key = frames[3].bytes
        token = frames[4].bytes
        credential = frames[1].bytes == b"C"
        journal = self.journal_of(ledger_id)
        try:
            # behind a request of its ledger or journal that waits (core/adds.py invariant 1)
            if self.machine.arrive(ledger_id, journal, self.current, first_stalled) == WAIT:
                return True
            if self.park(ledger_id, key, credential) or self.unnamed(ledger_id, False, credential):
                return True
            placed = self.machine.decide_fence(ledger_id, key, credential, self.owner_of(ledger_id))
        except Rejected as e:
            self.count(FENCE_OP, e.status)
            self.control.send_multipart([ident, b"F", token, wire.STATUS.pack(e.status)])
            return True
        rec = records.fence_record(ledger_id, placed.key, placed.flags)
        if not self.room_for(journal, len(rec)):
            self.no_room_in = journal
            return False
        _, end = self.place(journal, [rec])
        if self.storage.table.apply(records.parse(rec, 0)):
            self.store_record(ledger_id, rec)
        self.stats["fences_total"] += 1
        # Answer once the fence record is durable (DESIGN invariant 4).
        self.pending.append(Pending(end, [None, ident, b"F", token, wire.STATUS.pack(Status.OK)], ledger_id,
                                    FENCE_OP, self.taken_at, journal))
        return True
