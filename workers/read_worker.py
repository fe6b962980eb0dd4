"""The read worker: owns the client-facing read socket.

Serves READ (entry ranges, or every stride-th entry of one with STRIDE; optionally fencing first), READ_LAC (optionally fencing, optionally
long-polling, a long poll optionally with the entries up to the LAC it answers: WITH_ENTRIES,
read in the same snapshot as that LAC, so never an entry past it) and INFO.  Entries are found through the LMDB index and read from the entry logs
with ``pread``, merging neighbours into one read.

Read-after-ack: every answer is computed in a read transaction begun after its request was
taken off the socket (``snapshot``).  The add worker commits an entry's index location before it
acknowledges the entry, so an entry acknowledged to anyone is visible to every request that
arrives after the ack, however long the batch this worker is working through.  (Beginning a
read transaction costs about a microsecond: py-lmdb reuses its reader slot.)  The batching that
is safe stays: up to ``MAX_MESSAGES_PER_ITERATION`` requests per wake-up, neighbouring entries
merged into one ``pread``.

Fencing is a write: the request goes to the add worker over the internal control socket, which
journals the fence and answers once it is durable; only then does this worker answer the client.
Every fence request carries its own token and gets its own answer: two clients fencing one
ledger with different keys each learn their own outcome.

Long polls park until the add worker publishes that the ledger moved, or until their timeout;
it publishes only while polls are parked here (``WakeNews`` in ``bookie.core.long_polls``: this
worker subscribes and unsubscribes over the control socket, and re-checks every parked poll
when a subscription is answered, so no wake-up is missed);
a ledger deleted meanwhile answers NO_LEDGER.  A long poll on a ledger this bookie holds nothing
of parks too when the metadata store knows the ledger (asked off the loop, through
``bookie.workers.claims``: rule in ``bookie.core.long_polls``); a made-up id is answered at once.  What one client can make this worker hold is
bounded (docs/security.md "Limits"): parked long polls plus waiting fences at
``maxPendingReadRequestsPerThread`` (``bookie.core.long_polls``: no step scans them), of
which one connection may park a quarter and one principal (its enrolled key, or its host:
``bookie.core.shares``) may park a quarter and have a quarter of fences waiting, and
reply bytes a connection has not read yet at ``maxReadReplyBytesPerConnection`` (large replies
are sent tracked; ZeroMQ releases them once they are in the kernel); past either, the answer is
TOO_MANY_REQUESTS.  No request, however malformed or unlucky, may
take this worker down: what escapes the checks becomes an error status and one log line.
"""

from __future__ import annotations

import collections
import itertools
import struct
import time

import numpy as np
import zmq

from bookie import wire, wire_sockets
from bookie.storage.layout import current_dir
from bookie.wire import Bits, Op, Status
from bookie.workers.auth import server_curve
from bookie.workers.client_sockets import (REFUSALS_PER_CONNECTION_PER_S, ConnectionCap,
                                           RefusalBudget, guard_client_socket, make_socket)
from bookie.workers.common import ClientServer
from bookie.core.long_polls import (ANSWER, ASK, OFF, SUBSCRIBE, SUBSCRIBED, LongPolls, WakeNews,
                                    on_nothing_held)
from bookie.core.shares import Held, address_principal, principal_of, share
from bookie.storage.ring import Ring
from bookie.storage.entrylog import EntryLogReader
from bookie.storage.read_ahead import ReadAhead
from bookie.storage.index import MAX_ENTRY_ID, Index, open_index
from bookie.workers.claims import OwnerLookup, OwnerResolver

MAX_MESSAGES_PER_ITERATION = 256
FENCE_TOKEN = struct.Struct("<Q")
NEWS_NUMBER = struct.Struct("<Q")  # WakeNews's SUBSCRIBE number
MAX_REQUEST_FRAME_BYTES = 4096  # a read request's frames are tens of bytes
TRACKED_REPLY_BYTES = 64 * 1024  # replies this large count against the connection's budget
# Fences of ledgers this bookie holds nothing of: a recovery meets one rarely (a bookie no add
# reached), a flood of them costs journal records and index entries.  Token bucket.
UNBOUND_FENCES_PER_S = 200.0
UNBOUND_FENCES_BURST = 400.0


class ReadServer(ClientServer):
    def __init__(self, ctx, index: Index, logs: EntryLogReader, ring: Ring, clients, control, lac_sub):
        super().__init__(ctx, clients, ring, current_dir(ctx.conf.ledger_dirs[0]))
        self.index = index
        self.logs = logs
        ahead = ctx.conf.read_ahead_cache_max_size_bytes
        self.read_ahead = ReadAhead(logs, ahead, ctx.conf.read_ahead_cache_batch_size) if ahead else None
        self.control = control
        self.lac_sub = lac_sub
        self.fence_waits: dict[bytes, tuple] = {}  # fence token -> (the parked request, principal)
        self.tokens = itertools.count(1)
        # one connection, and one principal, may park at most a quarter of the places, and one
        # principal have a quarter of them in fences waiting (docs/security.md "Limits")
        places = share(ctx.conf.max_pending_reads)
        self.polls = LongPolls(ctx.conf.max_pending_reads, places, key=lambda req: req[0],
                               per_principal=places)
        self.fences_held = Held(places)
        self.poll_lacs: dict[int, int | None] = {}  # turn_lac's LAC per ledger, this turn
        self.news = WakeNews()  # the add worker's news only while polls are parked
        self.principal_of = address_principal  # principal_of(frame, ident); run() sets CURVE's
        self.principal = None  # principal of the request being handled, when it takes a place
        self.max_pending = ctx.conf.max_pending_reads  # long polls + fences waiting
        self.reply_budget = ctx.conf.max_read_reply_bytes
        self.unread: dict[bytes, collections.deque] = {}  # ident -> (tracker, bytes) of big replies
        self.unread_bytes: dict[bytes, int] = {}
        self.cap = None  # ConnectionCap of the client socket
        self.refusals = RefusalBudget(REFUSALS_PER_CONNECTION_PER_S, None, self.forget_connection)
        self.frame = None  # a zmq.Frame of the request being handled
        self.gate = None  # workers/auth.py Gate when CURVE is on
        self.unbound_tokens = UNBOUND_FENCES_BURST
        self.unbound_at = time.monotonic()
        self.last_stats = 0.0
        self.read_latency = ctx.metrics.histogram("bookie_read_entry_seconds")
        # the store's answers for long polls on ledgers held nothing of (core/long_polls.py,
        # "A ledger this bookie holds nothing of yet"); None without a metadata store
        self.owners: OwnerResolver | None = None

    def snapshot(self):
        """A read transaction begun now: it sees every index commit made before this call."""
        return self.index.begin()

    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.clients, zmq.POLLIN)
        poller.register(self.control, zmq.POLLIN)
        poller.register(self.lac_sub, zmq.POLLIN)
        if self.cap is not None:
            poller.register(self.cap.monitor, zmq.POLLIN)
        poller.register(self.ctx.signal_fd, zmq.POLLIN)  # a SIGTERM ends the wait at once
        if self.owners is not None:
            poller.register(self.owners.fileno(), zmq.POLLIN)
        while not self.ctx.stopping:
            timeout = 100
            deadline = self.polls.next_deadline()
            if deadline is not None:
                timeout = max(0, min(timeout, int((deadline - time.monotonic()) * 1000) + 1))
            events = dict(poller.poll(timeout))
            if self.ctx.signal_fd in events:
                self.ctx.drain_signals()
            if self.cap is not None and self.cap.monitor in events:
                self.cap.drain()
            if self.lac_sub in events:
                moved = set()
                while True:
                    try:
                        moved.add(wire.LEDGER_ID.unpack(self.lac_sub.recv(zmq.NOBLOCK))[0])
                    except zmq.Again:
                        break
                for lid in moved:
                    self.wake_polls(lid)
                if moved and self.news.state == OFF:
                    self.tell_add_worker(self.news.news_unasked(time.monotonic()))
            if self.control in events:
                self.take_control()
            if self.owners is not None and self.owners.fileno() in events:
                for lid in self.owners.drain():
                    self.store_answered(lid)
            if self.clients in events:
                self.poll_lacs.clear()  # turn_lac's LACs live for one turn
                for _ in range(MAX_MESSAGES_PER_ITERATION):
                    try:
                        frames = wire_sockets.recv_frames(self.clients, copy=False)
                    except zmq.Again:
                        break
                    self.frame = frames[-1]  # its principal (CURVE) and its connection (refusals)
                    self.handle([f.bytes for f in frames])
            self.expire_polls()
            now = time.monotonic()
            self.tell_add_worker(self.news.tick(len(self.polls), now))
            if now - self.last_stats >= 1.0:
                self.last_stats = now
                (self.read_ahead or self.logs).prune()  # deleted entry logs give their space back
                s = dict(self.stats)
                if self.read_ahead is not None:
                    s["read_ahead_hits_total"] = self.read_ahead.hits
                    s["read_ahead_misses_total"] = self.read_ahead.misses
                    s["read_ahead_cache_bytes"] = self.read_ahead.cache_bytes
                s["long_polls_parked"] = len(self.polls)
                s["fences_waiting"] = len(self.fence_waits)
                for ident in list(self.unread):  # forget connections whose replies all left
                    self.over_reply_budget(ident)
                s["read_reply_bytes_queued"] = sum(self.unread_bytes.values())
                if self.cap is not None:
                    s["connections_open"] = len(self.cap.open)
                    s["connections_refused_total"] = self.cap.refused_total
                s["connections_shut_flooding_total"] = self.refusals.shut_total
                self.ctx.write_stats(s)

    # -- requests --------------------------------------------------------------------------------
    def handle(self, frames) -> None:
        if len(frames) < 2:
            self.stats["dropped_malformed_total"] += 1
            return
        ident, head, body = frames[0], frames[1], frames[2:]
        try:
            op, flags, request_id, ledger_id = wire.unpack_header(head)
            if self.gate is not None and self.gate.refusal(self.frame, op, flags):
                self.stats["rejected_unauthorized_total"] += 1  # CURVE: not this principal's role
                self.reply(ident, op, Status.UNAUTHORIZED, request_id, ledger_id)
                return
            wire.check_request_flags(op, flags)
        except wire.ProtocolError as e:
            self.reject_raw(ident, head, e.status)
            return
        req = (ident, op, flags, request_id, ledger_id, body)
        taken_at = time.monotonic()
        try:
            if op not in (Op.READ, Op.READ_LAC, Op.INFO):
                raise wire.ProtocolError(f"op {Op(op).name} goes to the add socket")
            if op != Op.INFO:
                self.check_body(req)
            if op == Op.READ and self.over_reply_budget(ident):
                raise wire.ProtocolError("replies left unread", Status.TOO_MANY_REQUESTS)
            if flags & (Bits.FENCE | Bits.LONG_POLL):
                if self.refusals.dropping(ident):  # queued by a connection shut for flooding:
                    # it would hold its host's share (core/shares.py) for a client that is gone
                    raise wire.ProtocolError("connection shut for flooding", Status.TOO_MANY_REQUESTS)
                if len(self.fence_waits) + len(self.polls) >= self.max_pending:
                    raise wire.ProtocolError("too many long polls and fences waiting", Status.TOO_MANY_REQUESTS)
                self.principal = self.principal_of(self.frame, ident)
            if flags & Bits.FENCE:
                key = body[-1]
                if not key or len(key) > wire.MAX_MASTER_KEY:
                    raise wire.ProtocolError("master key size")
                if self.fences_held.full(self.principal):
                    raise wire.ProtocolError("this client's share of fences waiting", Status.TOO_MANY_REQUESTS)
                if not self.may_fence(ledger_id):
                    raise wire.ProtocolError("too many fences of unknown ledgers", Status.TOO_MANY_REQUESTS)
                token = FENCE_TOKEN.pack(next(self.tokens))
                self.fence_waits[token] = (req, self.principal)
                self.fences_held.take(self.principal)
                kind = b"C" if flags & Bits.RECOVERY_CREDENTIAL else b"F"  # C: key is the credential
                self.control.send_multipart([kind, wire.LEDGER_ID.pack(ledger_id), key, token])
                self.stats["fence_requests_total"] += 1
                return
        except wire.ProtocolError as e:
            self.refuse(ident, op, e.status, request_id, ledger_id)
            return
        self.respond(req, self.answer)
        if op == Op.READ or (op == Op.READ_LAC and not flags & Bits.LONG_POLL):
            self.read_latency.observe(time.monotonic() - taken_at)

    def refuse(self, ident, op, status, request_id, ledger_id) -> None:
        """Answer a refused request; past its connection's refusal budget, shut the connection
        down instead (``ClientServer.flooding``)."""
        self.stats[f"rejected_{status.name.lower()}_total"] += 1
        if not self.flooding(ident, self.frame, status):
            self.reply(ident, op, status, request_id, ledger_id)

    def counts_as_flooding(self, status) -> bool:
        """Only TOO_MANY_REQUESTS: the read socket's other refusals are cheap answers."""
        return status == Status.TOO_MANY_REQUESTS

    def forget_connection(self, ident) -> None:
        """A connection shut down for flooding: its parked long polls give their places back."""
        self.log_shut(long_polls_dropped=self.polls.drop_where(lambda req: req[0] == ident))

    def respond(self, req, step) -> None:
        """Run ``step(txn, req)`` in a fresh snapshot; whatever it raises becomes an answer."""
        ident, op, _, request_id, ledger_id, _ = req
        try:
            with self.snapshot() as txn:
                step(txn, req)
        except wire.ProtocolError as e:
            self.refuse(ident, op, e.status, request_id, ledger_id)
        except OSError as e:
            self.ctx.log("read failed", ledger=ledger_id, error=str(e))
            self.reply(ident, op, Status.IO_ERROR, request_id, ledger_id)
        except Exception as e:  # an input nobody foresaw must not take the read path down
            self.stats["internal_errors_total"] += 1
            self.ctx.log("request failed", op=Op(op).name, ledger=ledger_id, error=repr(e))
            self.reply(ident, op, Status.BAD_REQUEST, request_id, ledger_id)

    def check_body(self, req) -> None:
        _, op, flags, _, _, body = req
        want = 0
        if op == Op.READ:
            want = 1
            if len(body) >= 1:
                wire.unpack_read_body(flags, body[0])
        elif flags & Bits.LONG_POLL:
            want = 1
            if len(body) >= 1:
                wire.unpack_long_poll_body(flags, body[0])
        if flags & Bits.FENCE:
            want += 1
        if len(body) != want:
            raise wire.ProtocolError(f"{Op(op).name} with flags {flags:#x} takes {want} body frames, got {len(body)}")

    def answer(self, txn, req) -> None:
        ident, op, flags, request_id, ledger_id, body = req
        if op == Op.INFO:
            self.reply(ident, op, Status.OK, request_id, ledger_id, [self.info()])
            return
        if op == Op.READ:
            first, max_count, stride = wire.unpack_read_body(flags, body[0])
            entries, total = self.entries_from(txn, ledger_id, first, max_count, wire.MAX_READ_BYTES, stride)
            if not entries:
                status = Status.NO_ENTRY if self.index.get_ledger(txn, ledger_id) is not None else Status.NO_LEDGER
                self.reply(ident, op, status, request_id, ledger_id)
                return
            lengths = np.fromiter((len(e) for e in entries), dtype=wire.LENGTHS_DTYPE, count=len(entries))
            data = b"".join(entries)
            if len(data) >= TRACKED_REPLY_BYTES:
                self.reply_tracked(ident, op, request_id, ledger_id, [lengths.tobytes(), data])
            else:
                self.reply(ident, op, Status.OK, request_id, ledger_id, [lengths.tobytes(), data])
            self.stats["read_entries_total"] += len(entries)
            self.stats["read_bytes_total"] += total
            self.stats["read_requests_total"] += 1
            return
        # READ_LAC
        if flags & Bits.LONG_POLL:
            previous, timeout_ms, _, _ = wire.unpack_long_poll_body(flags, body[0])
            turn_lac = self.turn_lac(txn, ledger_id) if timeout_ms > 0 else None
            if (turn_lac is not None and turn_lac <= previous) or (
                    timeout_ms > 0 and turn_lac is None and self.parks_unheld(txn, ledger_id)):
                deadline = time.monotonic() + min(timeout_ms, wire.MAX_LONG_POLL_MS) / 1000.0
                if not self.polls.park(ledger_id, previous, deadline, req, self.principal):
                    raise wire.ProtocolError("too many long polls", Status.TOO_MANY_REQUESTS)
                return
        lac, last = self.lac_of(txn, ledger_id)
        self.send_lac(txn, req, lac, last)
        if lac is not None:
            self.stats["read_lac_total"] += 1

    def entries_from(self, txn, ledger_id: int, first: int, max_count: int, max_bytes: int,
                     stride: int = 1) -> tuple[list, int]:
        """The entries this bookie holds of ``ledger_id`` from ``first`` on, every ``stride``-th
        one, up to the first it does not hold: at most ``max_count`` (and MAX_BATCH) of them and
        at most ``max_bytes`` in all (but always the first one it holds).

        Returns:
            (the entries in order, their total size in bytes); ([], 0) when it holds not even
            the first.
        """
        max_count = min(max_count, wire.MAX_BATCH)
        if stride == 1:
            locs = self.index.locate_range(txn, ledger_id, first, max_count)
        else:
            locs = self.index.locate_strided(txn, ledger_id, first, max_count, stride)
        total = 0
        keep = 0
        for _, _, ln in locs:
            if keep and total + ln > max_bytes:
                break
            total += ln
            keep += 1
        if not keep:
            return [], total
        if self.read_ahead is None:
            return self.logs.read_run(locs[:keep]), total
        return self.read_ahead.read_run(locs[:keep], self.written_end(
            txn, ledger_id, first + (keep - 1) * stride, stride)), total

    def written_end(self, txn, ledger_id: int, last: int, stride: int):
        """``ReadAhead.read_run``'s ``more_written`` for a read whose last entry is ``last``:
        the end of the committed location of the entry the read-ahead would reach, when it is
        in the log asked about; every byte of that log before it is final
        (storage/read_ahead.py rule 1).  One index look-up, only on a miss, and none while the
        reader is short of where the ledger ended at its last failed look-up
        (``ReadAhead.probe_due``): a tailer pays one per read-ahead batch, not one per read; a
        reader within a read-ahead of a ledger's end or of a log's end reads without it."""
        ahead = self.read_ahead

        def more_written(log_id: int) -> int | None:
            if not ahead.probe_due(ledger_id, last):
                return None
            probe = min(last + ahead.batch_entries * stride, MAX_ENTRY_ID)
            loc = self.index.locate(txn, ledger_id, probe)
            if loc is None:
                ahead.probe_failed(ledger_id, probe)
                return None
            return loc[1] + loc[2] if loc[0] == log_id else None
        return more_written

    def parks_unheld(self, txn, ledger_id: int) -> bool:
        """Whether a long poll on a ledger this bookie holds nothing of parks: the store knows
        it, or is being asked (``core.long_polls.on_nothing_held``); never a deleted one."""
        if self.owners is None or self.index.is_deleted(txn, ledger_id):
            return False
        what = on_nothing_held(self.owners.owner(ledger_id))
        if what == ASK and not self.owners.ask(ledger_id):
            what = ANSWER  # lookups queued to the limit: answered now, as before
        return what != ANSWER

    def store_answered(self, ledger_id: int) -> None:
        """The store's answer for a ledger polls were parked on while it was asked: one that
        does not know it (or could not be asked) answers those polls now, unless the ledger
        got entries meanwhile (then its LAC decides, as for any poll)."""
        if not self.polls.waiting_on(ledger_id):
            return
        if on_nothing_held(self.owners.owner(ledger_id)) != ANSWER:
            return  # known: the polls wait for an entry or their timeout
        self.owners.consume(ledger_id)
        try:
            with self.snapshot() as txn:
                lac, last = self.lac_of(txn, ledger_id)
                for req in self.polls.ledger_moved(ledger_id, lac):
                    self.send_lac(txn, req, lac, last)
        except OSError as e:
            self.ctx.log("read failed", ledger=ledger_id, error=str(e))

    def turn_lac(self, txn, ledger_id: int) -> int | None:
        """The ledger's LAC as read once in this loop turn (``poll_lacs``, emptied each turn),
        for deciding whether a long poll parks: a flood of polls asks one ledger again and
        again, and each fresh read costs an index lookup and an entry-log read.

        Why parking on it is safe: it is read after this turn took the add worker's LAC
        notices, so a commit it does not show is notified after it was read, and that notice
        is taken in a later turn, which wakes the parked poll with a fresh read
        (``wake_polls``), as it would have woken a poll parked on a fresh read.  Answers are
        always read fresh (``answer``)."""
        if ledger_id not in self.poll_lacs:
            self.poll_lacs[ledger_id] = self.lac_of(txn, ledger_id)[0]
        return self.poll_lacs[ledger_id]

    def lac_of(self, txn, ledger_id: int):
        """(lac, last_entry_id) as this bookie knows them; (None, None) for an unknown ledger."""
        state = self.index.get_ledger(txn, ledger_id)
        if state is None:
            return None, None
        lac = state.get("lac", -1)
        last = self.index.last_entry(txn, ledger_id)
        if last is None:
            return lac, -1
        entry_id, (log_id, off, _) = last
        header = self.logs.read(log_id, off, wire.ENTRY_HEADER_SIZE)
        return max(lac, wire.unpack_entry_header(header)[2]), entry_id

    def reply_lac(self, txn, req) -> None:
        """Answer a parked long poll now, with the ledger's current LAC (NO_LEDGER if it is gone)."""
        self.send_lac(txn, req, *self.lac_of(txn, req[4]))

    def send_lac(self, txn, req, lac, last) -> None:
        """Answer a READ_LAC with ``lac_of``'s (lac, last) as read in ``txn``: NO_LEDGER when
        lac is None; a poll that asked for entries (WITH_ENTRIES) gets them too, read in the
        same ``txn`` and never past that lac (``entries_up_to``)."""
        ident, op, flags, request_id, ledger_id, _ = req
        if lac is None:
            self.reply(ident, op, Status.NO_LEDGER, request_id, ledger_id)
            return
        body = [wire.LAC_BODY.pack(lac, last)]
        if flags & Bits.WITH_ENTRIES:
            body += self.entries_up_to(txn, req, lac)
            if len(body[2]) >= TRACKED_REPLY_BYTES:
                self.reply_tracked(ident, op, request_id, ledger_id, body)
                return
        self.reply(ident, op, Status.OK, request_id, ledger_id, body)

    def entries_up_to(self, txn, req, lac: int) -> list:
        """The [lengths, data] frames of a WITH_ENTRIES poll's answer: the entries this bookie
        holds from the poll's previous_lac + 1 on, up to ``lac`` (the LAC the same answer
        reports: an entry past it is not known to be confirmed) and the poll's limits (trimmed
        to the bookie's own).  Empty frames when none: nothing new, a connection over its
        reply budget, or an entry log that failed to read (the LAC alone is still true; the
        client reads the entries as without the flag)."""
        ident, _, flags, _, ledger_id, body = req
        previous, _, max_entries, max_bytes = wire.unpack_long_poll_body(flags, body[0])
        first = max(previous + 1, 0)
        count = min(max_entries, lac - first + 1)
        if count <= 0 or self.over_reply_budget(ident):
            return [b"", b""]
        try:
            entries, total = self.entries_from(txn, ledger_id, first, count, max_bytes)
        except OSError as e:
            self.ctx.log("read failed", ledger=ledger_id, error=str(e))
            return [b"", b""]
        self.stats["read_entries_total"] += len(entries)  # (a poll's entries count as read)
        self.stats["read_bytes_total"] += total
        lengths = np.fromiter((len(e) for e in entries), dtype=wire.LENGTHS_DTYPE, count=len(entries))
        return [lengths.tobytes(), b"".join(entries)]

    # -- fences, long polls ----------------------------------------------------------------------
    def take_control(self) -> None:
        """Answers of the add worker to fence requests: [b"F", token, status]."""
        while True:
            try:
                frames = self.control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) == 2 and frames[0] == SUBSCRIBED and len(frames[1]) == NEWS_NUMBER.size:
                if self.news.subscribed(NEWS_NUMBER.unpack(frames[1])[0]):
                    # news on from now; every commit before it is seen by a fresh read now
                    # (core/long_polls.py WakeNews: the ordering argument)
                    self.recheck_polls()
                continue
            if len(frames) != 3 or frames[0] != b"F" or len(frames[2]) != wire.STATUS.size:
                continue
            waiting = self.fence_waits.pop(frames[1], None)
            if waiting is None:
                continue
            req, self.principal = waiting  # a fenced long poll parks as its principal's
            self.fences_held.give(self.principal)
            (status,) = wire.STATUS.unpack(frames[2])
            ident, op, flags, request_id, ledger_id, body = req
            if status != Status.OK:
                self.reply(ident, op, status, request_id, ledger_id)
                continue
            self.respond((ident, op, flags & ~(Bits.FENCE | Bits.RECOVERY_CREDENTIAL), request_id, ledger_id,
                          body[:-1]), self.answer)

    def recheck_polls(self) -> None:
        """Every parked poll as if its ledger moved: the news just turned on, and a commit made
        while it was off is seen by this fresh read (core/long_polls.py WakeNews).  A ledger the
        index holds nothing of (polls parked by ``parks_unheld``) has not moved: its polls stay."""
        try:
            with self.snapshot() as txn:
                moved = [(lid, *self.lac_of(txn, lid)) for lid in self.polls.ledgers()]
                moved = [(lid, lac, last) for lid, lac, last in moved
                         if lac is not None or self.index.is_deleted(txn, lid)]
                for lid, lac, last in moved:
                    for req in self.polls.ledger_moved(lid, lac):
                        self.send_lac(txn, req, lac, last)
        except OSError as e:
            self.ctx.log("read failed", error=str(e))  # the polls wait for the news or their timeout

    def tell_add_worker(self, message: bytes | None) -> None:
        """Send WakeNews's SUBSCRIBE (with its number) or UNSUBSCRIBE, if any."""
        if message is None:
            return
        frames = [message, NEWS_NUMBER.pack(self.news.number)] if message == SUBSCRIBE else [message]
        try:
            self.control.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # a SUBSCRIBE is sent again (WakeNews.tick); the news is on by default

    def wake_polls(self, ledger_id: int) -> None:
        """The ledger moved: answer its polls whose LAC it passed (all of them if it is gone)."""
        if not self.polls.waiting_on(ledger_id):
            return
        try:
            with self.snapshot() as txn:
                lac, last = self.lac_of(txn, ledger_id)
                for req in self.polls.ledger_moved(ledger_id, lac):
                    self.send_lac(txn, req, lac, last)
        except OSError as e:
            self.ctx.log("read failed", ledger=ledger_id, error=str(e))  # the polls wait for their timeout

    def expire_polls(self) -> None:
        for req in self.polls.expired(time.monotonic()):
            self.respond(req, self.reply_lac)

    def may_fence(self, ledger_id: int) -> bool:
        """A fence of a ledger the index holds always may go; one of an unknown ledger (it would
        be fenced unbound: bookie.core.ledgers rule 2) takes a token of a bucket refilled at
        UNBOUND_FENCES_PER_S, so a flood of fences of new ids costs the bookie a bounded rate."""
        with self.snapshot() as txn:
            if self.index.get_ledger(txn, ledger_id) is not None or self.index.is_deleted(txn, ledger_id):
                return True
        now = time.monotonic()
        self.unbound_tokens = min(UNBOUND_FENCES_BURST,
                                  self.unbound_tokens + (now - self.unbound_at) * UNBOUND_FENCES_PER_S)
        self.unbound_at = now
        if self.unbound_tokens < 1.0:
            return False
        self.unbound_tokens -= 1.0
        return True

    # -- what one connection may leave unread ----------------------------------------------------
    def reply_tracked(self, ident, op, request_id, ledger_id, body) -> None:
        """Send a large OK reply tracked: it counts against the connection's budget until
        ZeroMQ has handed it to the kernel."""
        self.count(op, Status.OK)
        try:
            tracker = self.clients.send_multipart(
                [ident, wire.pack_header(op, Status.OK, request_id, ledger_id), *body],
                zmq.NOBLOCK, copy=False, track=True)
        except zmq.ZMQError:
            self.stats["replies_dropped_total"] += 1
            return
        key = bytes(ident)
        size = sum(len(b) for b in body)
        self.unread.setdefault(key, collections.deque()).append((tracker, size))
        self.unread_bytes[key] = self.unread_bytes.get(key, 0) + size

    def over_reply_budget(self, ident) -> bool:
        key = bytes(ident)
        queue = self.unread.get(key)
        if not queue:
            return False
        while queue and queue[0][0].done:  # a connection's replies leave in order
            self.unread_bytes[key] -= queue.popleft()[1]
        if not queue:
            del self.unread[key], self.unread_bytes[key]
            return False
        return self.unread_bytes[key] >= self.reply_budget


def run(ctx) -> int:
    conf = ctx.conf
    index_dir = current_dir(conf.index_dirs[0])
    env = open_index(index_dir, conf.index_map_size_bytes)
    index = Index(env)
    logs = EntryLogReader([current_dir(d) for d in conf.ledger_dirs])
    ring = Ring.attach(ctx.ring_path)
    curve = server_curve(conf)  # before the context: a bad key file stops the worker here
    zctx = zmq.Context()
    if curve:
        curve.start(zctx, ctx.log)
    clients = make_socket(zctx, zmq.ROUTER, linger_ms=500)
    if curve:
        curve.secure(clients)
    clients.setsockopt(zmq.SNDHWM, 100_000)
    guard_client_socket(clients, conf, MAX_REQUEST_FRAME_BYTES)
    cap = ConnectionCap(clients, conf.max_client_connections, conf.bookie_port + 1)
    clients.bind(f"tcp://{conf.listening_interface}:{conf.bookie_port + 1}")
    cap.local_path = curve.bind_local(clients, "read", conf.bookie_port)  # same-host clients
    control = make_socket(zctx, zmq.DEALER)
    control.connect(ctx.endpoint("add.ctl"))
    lac_sub = make_socket(zctx, zmq.SUB)
    lac_sub.setsockopt(zmq.SUBSCRIBE, b"")
    lac_sub.connect(ctx.endpoint("add.lac"))
    server = ReadServer(ctx, index, logs, ring, clients, control, lac_sub)
    server.cap = server.refusals.cap = cap
    server.gate = curve.gate if curve else None
    server.principal_of = principal_of(curve.enrolled)
    if conf.metadata_uri:
        server.owners = OwnerResolver(OwnerLookup(conf.metadata_uri, conf.zk_security, ctx.log))
    ctx.log("read worker ready", port=conf.bookie_port + 1)
    ctx.ready()
    try:
        server.serve()
    finally:
        for s in (cap, clients, control, lac_sub):
            s.close()
        if server.owners is not None:
            server.owners.close()
        if curve:
            curve.stop()
        zctx.term()
        logs.close()
        env.close()
    ahead = server.read_ahead
    ctx.log("read worker stopped", **({} if ahead is None else
                                      {"read_ahead_hits": ahead.hits, "read_ahead_misses": ahead.misses}))
    return 0
