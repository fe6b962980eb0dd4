"""The add worker: owns the client-facing add socket, the entry logs and the index writes.

This module is the loop: it decodes each message into a ``bookie.core.adds.Request``, makes one
call of the add machine for it (``AddMachine.take``: which request is decided now and which
waits, for its owner lookup or for its journal's ring room; the ledger rules; write-once; the
quota; the no-room state; the refusals) and carries out the actions the machine returns: ring
writes, entry-log writes, held-back answers, sends.  ``LoopView`` is what the machine may ask of
the loop; no rule about a request is decided here.

Per loop iteration (everything batched; no per-entry Python work on the hot path):

0. Wait (``wait``): while answers wait on a journal, with ``idleSpinMicros`` set, look at the
   DURABLE cursors and the sockets without sleeping for that long first (core/idle.py).
1. Answer the adds whose records the journal has made durable (DURABLE passed their end).
   Their index entries were committed in an earlier iteration, so an acknowledged entry is
   readable by the read worker from the moment its ack leaves (read-after-ack).
2. Take every request waiting on the add socket and the control socket (fences from the read
   worker).  Decode its frames here (header, frame count) and let the machine decide it; place
   each accepted one once in the shared-memory ring as a record, apply that record to the
   table.  The journal is
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

import os
import time

import zmq

from bookie import wire, wire_sockets
from bookie.metadata.recovery_secret import read_secret_file
from bookie.storage.layout import current_dir, key_salt
from bookie.wire import Op, Status
from bookie.storage import records
from bookie.core.answers import JournalAnswers
from bookie.core.idle import PARK, YIELD, Backoff
from bookie.core.long_polls import SUBSCRIBE, SUBSCRIBED, UNSUBSCRIBE
from bookie.workers.auth import server_curve
from bookie.workers.client_sockets import (REFUSALS_PER_CONNECTION_PER_S, ConnectionCap,
                                           RefusalBudget, guard_client_socket, make_socket)
from bookie.workers.common import OP_NAMES, ClientServer
from bookie.storage.checkpoint import Checkpointer, checkpoint
from bookie.workers.add_quotas import QuotaStore
from bookie.workers.add_records import Placer
from bookie.workers.add_view import LoopView, Origin
from bookie.workers.claims import OwnerLookup, OwnerResolver
from bookie.workers.frame_guard import FrameGuard
from bookie.storage.journal_replay import replay
from bookie.core.adds import (FENCE, AddMachine, AnswerAt, Failed, OwnerDone, PlaceAdd, PlaceRecord,
                              RecordSizes, Refuse, Request, Stall)
from bookie.core.ledgers import Rejected
from bookie.storage.noroom import RETRY_S, no_room
from bookie.storage.trace import ADD_FILE, AddTrace, open_trace
from bookie.storage.ring import (ADD_EPOCH, DURABLE, JOURNAL_NO_ROOM, NO_ROOM, WRITE, Doorbell,
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
# the records' sizes without key and data, for the machine's ring-room rule (core/adds.py)
RECORD_SIZES = RecordSizes(records.add_batch_parts(0, b"", b"", b"")[1], len(records.fence_record(0, b"")),
                           len(records.lac_record(0, 0, b"")))


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
                                conf.max_entry_size_bytes, RETRY_S, RECORD_SIZES)
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
    server.placer = Placer(ctx.log, rings, wakes, storage, server.machine, server.pending,
                           server.checkpointer, server.stats, server.trace)
    server.view = LoopView(rings, storage, server.pending, server.owners, server.gate, server.placer)
    server.quotas = QuotaStore(server.machine, storage, conf.ledger_storage_quota_bytes, index_dir,
                               bool(curve) and curve.enrolled)
    ctx.log("add worker ready", port=conf.bookie_port, position=ring.get(WRITE))
    ctx.ready()
    try:
        server.serve(durable_in)
    finally:
        server.shutdown()
        server.quotas.close()
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


class AddServer(ClientServer):
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
        self.view: LoopView | None = None  # what the machine may ask of this loop
        self.quotas: QuotaStore | None = None  # the quota's identities and usage on disk
        self.checkpointer = Checkpointer(ctx, storage, ledger_dirs)
        self.add_latency = ctx.metrics.histogram("bookie_add_entry_seconds")
        self.taken_at = 0.0  # when the message being handled was taken off its socket
        self.placer: Placer | None = None  # set by run(): where accepted records go
        self.cap = None  # ConnectionCap of the client socket
        self.frame_guard = None  # workers/frame_guard.py: messages still arriving, per connection
        self.news_on = True  # tell the read worker which ledgers moved (core/long_polls.py WakeNews)
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
            placer = self.placer
            placer.rung, placer.unrung = set(), set()
            now = time.monotonic()
            if self.owners.fileno() in events:
                for actions in self.machine.resume(self.owners.drain(), self.view, now):
                    self.execute(actions)
            for actions in self.machine.retry(self.view, now):
                self.execute(actions)
            if not self.machine.all_stalled():  # a full ring holds back its own journal only
                if self.control in events:
                    self.take(self.control, internal=True)
                if self.clients in events:
                    self.take(self.clients, internal=False)
            for j in placer.unrung:
                self.wakes[j].ring()
            self.commit()
            self.quotas.save(time.monotonic(), bool(placer.held))
            if placer.deferred_waiting:  # stored now: deferred adds go without waiting for a poll
                placer.deferred_waiting = False
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
                checkpoint(self.storage, self.ledger_dirs, self.placer.mark())
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
        mark = self.placer.mark()
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
        self.quotas.stats(s)
        self.ctx.write_stats(s)

    def answer_durable(self) -> None:
        if not self.pending:
            return
        # Each journal's answers go in its own order, as soon as that journal made them durable.
        now = time.monotonic()
        for p in self.machine.due(self.durables(), self.placer.safe_to):
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
            for lid in self.placer.moved | gone:
                self.lac_pub.send(wire.LEDGER_ID.pack(lid))
        self.placer.moved.clear()

    def commit(self, final: bool = False) -> None:
        """The iteration's index commit (``Placer.commit``); then the long polls' news."""
        gone = self.placer.commit(final)
        if gone is not None and (self.placer.moved or gone):
            self.publish_moved(gone)

    def take(self, sock, internal: bool) -> None:
        """Decide every message waiting on ``sock`` (up to ``MAX_MESSAGES_PER_ITERATION``)."""
        placer = self.placer
        placer.lac_taken = False
        machine = self.machine
        for _ in range(MAX_MESSAGES_PER_ITERATION):
            try:
                frames = wire_sockets.recv_frames(sock, copy=False)
            except zmq.Again:
                break
            self.taken_at = time.monotonic()
            if internal:
                self.handle_control(frames)
            else:
                if self.frame_guard is not None:
                    self.frame_guard.delivered(frames)
                self.handle(frames)
            if machine.stalled_count and machine.all_stalled():
                break  # every journal's ring is full: ZeroMQ's queue pushes back on the clients
            if placer.lac_taken:
                # A WRITE_LAC ends the iteration: its commit and the long polls it wakes then
                # come now, not after up to MAX_MESSAGES_PER_ITERATION queued adds (a LAC
                # notice exists to overtake those: client/protocol/writer.py ``_notice``).
                placer.lac_taken = False
                break

    # -- one message: decoded here, decided by the machine, carried out here ---------------------
    def handle(self, frames) -> None:
        """Decode one client message into a ``Request`` and carry out the machine's actions."""
        if len(frames) < 2:
            self.stats["dropped_malformed_total"] += 1
            return
        ident = frames[0].bytes
        head = frames[1].bytes
        try:
            op, flags, request_id, ledger_id = wire.unpack_header(head)
            wire.check_request_flags(op, flags)
        except wire.ProtocolError as e:
            self.reject_raw(ident, head, e.status)
            return
        origin = Origin(ident, request_id, frames[1], self.taken_at)
        journal = journal_of(ledger_id, self.journals)
        body = frames[2:]
        try:
            if self.gate is not None and self.gate.refusal(frames[1], op, flags):
                raise Rejected(Status.UNAUTHORIZED, "role does not allow the op")
            if op == Op.ADD:
                if len(body) != 3:
                    raise Rejected(Status.BAD_REQUEST, "ADD takes master key, lengths and data frames")
                request = Request(op, ledger_id, journal, flags, body[0].bytes,
                                  (body[1].buffer, body[2].buffer), False, origin)
            elif op == Op.WRITE_LAC:
                if len(body) != 2 or len(body[1]) != wire.WRITE_LAC_BODY.size:
                    raise Rejected(Status.BAD_REQUEST, "WRITE_LAC takes master key and lac frames")
                request = Request(op, ledger_id, journal, flags, body[0].bytes,
                                  wire.WRITE_LAC_BODY.unpack(body[1].bytes), False, origin)
            elif op == Op.FORCE_LEDGER:
                if body:
                    raise Rejected(Status.BAD_REQUEST, "FORCE_LEDGER takes no body")
                request = Request(op, ledger_id, journal, flags, b"", (), False, origin)
            elif op == Op.INFO:
                self.pending.admit(journal, frames[1], ident, op)  # a connection shut: dropped
                self.reply(ident, op, Status.OK, request_id, ledger_id, [self.info()])
                return
            else:
                raise Rejected(Status.BAD_REQUEST, f"op {Op(op).name} goes to the read socket")
        except (Rejected, wire.ProtocolError) as e:
            self.refuse(Request(op, ledger_id, journal, flags, b"", (), False, origin), e.status)
            return
        self.execute(self.machine.take(request, self.view, self.taken_at))

    def handle_control(self, frames) -> None:
        """From the read worker: long-poll news on or off, and fences: [ident, b"F", ledger_id,
        master_key, token] (b"C": the key is the ledger's recovery credential).  Each fence is
        answered on its own, [ident, b"F", token, status]: fences of one ledger with different
        keys get different answers."""
        if len(frames) in (2, 3) and frames[1].bytes in (SUBSCRIBE, UNSUBSCRIBE):
            # taken in this loop's order with the commits: the ordering argument of
            # core/long_polls.py WakeNews needs the answer to leave after every earlier commit
            self.news_on = frames[1].bytes == SUBSCRIBE
            if self.news_on and len(frames) == 3:
                self.control.send_multipart([frames[0].bytes, SUBSCRIBED, frames[2].bytes])
            return
        if len(frames) != 5 or frames[1].bytes not in (b"F", b"C") or len(frames[2]) != wire.LEDGER_ID.size:
            self.stats["dropped_malformed_total"] += 1
            return
        (ledger_id,) = wire.LEDGER_ID.unpack(frames[2].bytes)
        origin = Origin(frames[0].bytes, frames[4].bytes, None, self.taken_at)
        self.execute(self.machine.take(Request(FENCE, ledger_id, journal_of(ledger_id, self.journals), 0,
                                               frames[3].bytes, (), frames[1].bytes == b"C", origin),
                                       self.view, self.taken_at))

    def execute(self, actions) -> None:
        """Carry out the machine's actions about requests (core/adds.py), in order."""
        for a in actions:
            kind = type(a)
            if kind is PlaceAdd:
                self.placer.place_add(a)
            elif kind is PlaceRecord:
                self.placer.place_record(a)
            elif kind is AnswerAt:
                self.placer.hold(a)
            elif kind is Refuse:
                self.refuse(a.request, a.status)
            elif kind is Stall:
                self.wakes[a.journal].ring()  # room comes as the journal writes (deferred records too)
            elif kind is OwnerDone:
                self.owners.consume(a.ledger_id)
            elif kind is Failed:
                r = a.request
                self.stats["internal_errors_total"] += 1
                self.ctx.log("request failed", op=OP_NAMES.get(r.op, "UNKNOWN"), ledger=r.ledger_id,
                             error=a.error)
                self.refuse(r, Status.BAD_REQUEST, counted=False)

    def refuse(self, r: Request, status: Status, counted: bool = True) -> None:
        """Answer a request ``status`` now (a fence to the read worker; a client's unless its
        connection is over its refusal budget: ``flooding``)."""
        o = r.token
        if r.op == FENCE:
            self.count(FENCE, status)
            self.control.send_multipart([o.ident, b"F", o.request_id, wire.STATUS.pack(status)])
            return
        if counted:
            self.stats[f"rejected_{status.name.lower()}_total"] += 1
        if not self.flooding(o.ident, o.frame, status):  # over its budget: shut, unanswered
            self.reply(o.ident, r.op, status, o.request_id, r.ledger_id)

    def durables(self) -> list[int]:
        return [r.get(DURABLE) for r in self.rings]

