"""The client's I/O thread: ZeroMQ sockets, timers and the metadata calls that drive the
protocol state machines.

Theory of operation
-------------------
One thread per BookKeeper client owns a ZeroMQ context, a DEALER socket per bookie per bookie
socket (add at port P, read at P + 1, created on first use, LINGER 0) and a poller.  WRITE_LACs
(explicit LACs, LAC notices) go to the add port on a DEALER of their own (``LAC``): a bookie's
ROUTER takes messages from its connections in turn, so a LAC is never queued behind the ADDs a
deep window has in flight on the add connection (the tailing readers' lag).  It is the
only thread that touches protocol state: user threads hand work over with ``submit`` (a
deque plus an eventfd the poller watches; the eventfd is written only when the thread is not
already woken, so a burst of adds costs one wake-up).

Each protocol operation runs inside a ``Driver``: the thread feeds it events (responses,
timeouts, metadata results) and executes the actions it returns:

* request actions become wire messages with a fresh request id, remembered with a deadline;
  a missing answer becomes a TIMEOUT event and resets the socket so stale requests queued
  for a dead bookie are dropped;
* ``SendAdd`` actions of one operation to one bookie are merged until the end of the loop
  iteration and leave as few ADD messages as the batch limits allow (pipelining);
* ``ListBookies`` / ``WriteMetadata`` run on a small thread pool (store calls block) and come
  back as events through ``submit``;
* ``Suspect`` marks a bookie as failing lately (as a timeout does): later reads start their
  entries elsewhere until it answers again;
* READs are paced per bookie, and retried after TOO_MANY_REQUESTS (client/pacing.py);
* everything else (Confirm, FailAdds, Deliver, Finished) goes to the driver's own outputs.

Nothing here decides protocol questions; it only moves bytes and time.

No exception escapes the loop.  Whatever an operation's code raises unexpectedly (its state
machine, its driver, a request it asked for that cannot be encoded) ends that operation alone:
it is logged on the ``bookie.client`` logger, the operation's caller gets a BookKeeperError,
and the operation is *over* - it gets no more events and sends nothing more, as after it
finished, failed or was cancelled.  Every other operation goes on.
"""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import zmq

from bookie import wire, wire_sockets
from bookie.client.connection import connect_proved
from bookie.client.resolver import ADDRESSES_ONLY, UnresolvedBookieError
from bookie.client.errors import BookKeeperError, ClientClosedError
from bookie.client.pacing import ReadPacer
from bookie.client.protocol import actions as A
from bookie.wire import Flag, Op

log = logging.getLogger("bookie.client")

ADD, READ, LAC = 0, 1, 2  # socket kinds; LAC: WRITE_LACs, to the add port
PORT_OFFSET = {ADD: 0, READ: 1, LAC: 0}
# LAC notices (writer.py ``_notice``) one client sends one bookie, at most: each costs the
# bookie a journal record and an index commit, and a client writing many ledgers would
# otherwise send one per ledger per interval.  Past it they are dropped (the LAC still travels
# with the next adds and the explicit LAC).
NOTICES_PER_BOOKIE_PER_S = 2000.0
# How long the I/O thread looks again without sleeping after a turn that did work (``_spin``)
IDLE_SPIN_S = 100e-6
SPIN_PREEMPTED_S = 50e-6  # a gap this long between two looks: the host is busy; park


class Driver:
    """Glue between one protocol operation of one ledger and the I/O thread.  Subclasses
    consume the outputs.

    ``over`` becomes true when the operation ended (finished, failed, cancelled, or failed by
    an unexpected exception) and the I/O thread let go of it: from then on it gets no events
    and whatever it would still send is dropped.
    """

    def __init__(self, io: "IOThread", op, ledger_id: int, master_key: bytes):
        self.io = io
        self.op = op
        self.ledger_id = ledger_id
        self.master_key = master_key  # sent with adds, fences and explicit LAC writes
        self.key_flags = 0  # Flag.RECOVERY_CREDENTIAL: master_key is the recovery credential
        self.add_flags = 0  # flags of a normal ADD: Flag.DEFERRED_SYNC for a deferred-sync writer
        self.over = False

    def start(self, actions) -> None:
        self.io.execute(self, actions)

    def event(self, event) -> None:
        if not self.over:
            self.io.execute(self, self.op.handle(event, time.monotonic()))

    def output(self, action) -> None:  # Confirm, FailAdds, Deliver, Finished
        raise NotImplementedError

    def abort(self, error) -> None:
        """The operation ends with ``error`` (the client is closing, or the operation failed
        unexpectedly): complete whatever the caller waits for with it."""


class _Request:
    __slots__ = ("driver", "action", "key", "deadline", "charge", "busy")

    def __init__(self, driver, action, key, deadline, charge=0, busy=None):
        self.driver, self.action, self.key, self.deadline = driver, action, key, deadline
        self.charge, self.busy = charge, busy  # READs: ReadPacer's charge, (refused at, times)


class IOThread:
    def __init__(self, *, add_timeout_s: float, read_timeout_s: float,
                 batch_max_entries: int, batch_max_bytes: int, list_bookies, write_metadata,
                 name: str = "bookkeeper-io", idle_spin_s: float = IDLE_SPIN_S):
        """
        Args:
            list_bookies: () -> writable bookie ids (runs on the metadata pool).
            write_metadata: (WriteMetadata action) -> MetadataWritten | MetadataConflict event
                (runs on the metadata pool; may raise BookKeeperError).
        """
        self.add_timeout_s = add_timeout_s
        self.read_timeout_s = read_timeout_s
        self._batch_entries = batch_max_entries
        self._batch_bytes = batch_max_bytes
        self._list_bookies = list_bookies
        self._write_metadata = write_metadata
        self._inbox: collections.deque = collections.deque()
        self._idle_spin_s = idle_spin_s  # after a turn that did work (``_spin``); 0: none
        self._busy = False  # the last turn delivered answers
        self._load_seen_at = float("-inf")  # ``_spin``: the host's load average, once a second
        self._host_busy = False
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._woken = False
        self._closing = False
        # Held while the wake-up fd is written or closed: a submit that saw the loop running
        # must not write to the fd the ending loop has just closed.
        self._wake_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._inflight: dict[int, _Request] = {}
        self._deadlines: list = []  # (deadline, request id)
        self._timers: list = []  # (when, seq, fn)
        self._seq = itertools.count()
        self._outbox: dict = {}  # (driver, bookie, recovery) -> [[ids...], [entries...]]
        self._sockets: dict = {}  # (bookie, kind) -> socket
        self._socket_keys: dict = {}  # socket -> (bookie, kind)
        self._proofs: dict = {}  # a socket's handshake monitor -> (Proof, bookie, kind)
        self._proof_of: dict = {}  # socket -> its Proof
        self._drivers: set[Driver] = set()
        # bookie -> when a request to it last timed out or could not be sent; cleared by its
        # next answer.  Reads start each entry at a replica not in here (slow-bookie avoidance).
        self._suspects: dict[str, float] = {}
        self.pacer = ReadPacer()  # READs in flight per bookie (client/pacing.py)
        self._notice_tokens: dict[str, tuple[float, float]] = {}  # bookie -> (tokens, when)
        # bench bookie --trace: a list gets (step, time.monotonic_ns()) of every ADD message this
        # thread takes up ("io_take"), is about to send ("io_sent") and has answered ("io_recv");
        # None: off
        self.trace: list | None = None
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=name + "-meta")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(10)

    # -- from any thread -----------------------------------------------------------------------

    def submit(self, fn, *args) -> None:
        """Run ``fn(*args)`` on the I/O thread (in submission order).  An exception it raises
        is logged and goes no further."""
        self.submit_to(None, fn, *args)

    def submit_to(self, driver: Driver | None, fn, *args) -> None:
        """Run ``fn(*args)`` on the I/O thread on behalf of ``driver``'s operation: skipped
        once the operation is over, and an exception it raises ends that operation."""
        if self._closing:
            raise ClientClosedError("the BookKeeper client is closed")
        self._inbox.append((driver, fn, args))
        if not self._woken:
            with self._wake_lock:
                if self._closing:
                    raise ClientClosedError("the BookKeeper client is closed")
                self._woken = True
                os.eventfd_write(self._wake_fd, 1)

    def call(self, fn, *args) -> Future:
        """Run ``fn(*args)`` on the I/O thread; a Future of its result."""
        fut: Future = Future()

        def run():
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller through the future
                fut.set_exception(exc)
        self.submit(run)
        return fut

    def offload(self, fn, *args) -> Future:
        """Run ``fn(*args)`` (a blocking store call) on the metadata pool; a Future of it."""
        return self._pool.submit(fn, *args)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._closing:
            return
        try:
            self.submit(self._stop)
        except ClientClosedError:
            return
        self._closing = True
        self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- on the I/O thread ---------------------------------------------------------------------

    def register(self, driver: Driver) -> None:
        self._drivers.add(driver)

    def unregister(self, driver: Driver) -> None:
        self._drivers.discard(driver)

    def end(self, driver: Driver) -> None:
        """The operation is over: no more events reach it and nothing more of it is sent."""
        driver.over = True
        self._drivers.discard(driver)

    def fail(self, driver: Driver, error: BookKeeperError) -> None:
        """End ``driver``'s operation with ``error`` (its caller gets the error)."""
        if driver.over:
            return
        self.end(driver)
        try:
            driver.abort(error)
        except Exception:  # noqa: BLE001 - the loop must go on
            log.exception("error while failing an operation of ledger %s", driver.ledger_id)

    def later(self, delay_s: float, fn, driver: Driver | None = None) -> None:
        """Run ``fn()`` after ``delay_s`` (for ``driver``'s operation: see ``submit_to``)."""
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._seq), driver, fn))

    def run_for(self, driver: Driver | None, fn, *args) -> None:
        """On the I/O thread: ``fn(*args)`` for ``driver``'s operation (skipped once it is
        over); an unexpected exception ends that operation (or is only logged when there is
        none) and never reaches the loop."""
        if driver is not None and driver.over:
            return
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one operation's bug must not stop the client
            if driver is None:
                log.exception("unexpected error in a client I/O callback")
                return
            log.exception("unexpected error in an operation of ledger %s (%s); failing it",
                          driver.ledger_id, type(driver.op).__name__)
            self.fail(driver, BookKeeperError(
                f"ledger {driver.ledger_id}: the client failed unexpectedly ({exc!r}); this "
                f"operation was ended (see the 'bookie.client' log)",
                ledger_id=driver.ledger_id))

    def execute(self, driver: Driver, actions) -> None:
        if driver.over:
            return  # an operation that is over sends nothing more
        for a in actions:
            kind = type(a)
            if kind is A.SendAdd:
                if a.delay_s > 0:
                    delayed = A.SendAdd(a.bookie, a.entry_ids, a.entries, a.recovery)
                    self.later(a.delay_s, lambda d=driver, x=delayed: self.execute(d, [x]),
                               driver)
                    continue
                key = (driver, a.bookie, a.recovery)
                box = self._outbox.get(key)
                if box is None:
                    self._outbox[key] = [[a.entry_ids], [a.entries]]
                else:
                    box[0].append(a.entry_ids)
                    box[1].append(a.entries)
            elif kind is A.SendRead:
                self._send_read(driver, a)
            elif kind is A.SendReadLac:
                self._send(driver, a)
            elif kind is A.SendWriteLac:
                if not a.notice or self._notice_allowed(a.bookie):
                    self._send(driver, a)
            elif kind is A.SendForce:
                self._send(driver, a)
            elif kind is A.TickAfter:
                self.later(a.delay_s, lambda d=driver: d.event(A.Tick()), driver)
            elif kind is A.Suspect:
                self._suspects[a.bookie] = time.monotonic()
            elif kind is A.ListBookies:
                self._pool.submit(self._run_list, driver)
            elif kind is A.WriteMetadata:
                self._pool.submit(self._run_write, driver, a)
            else:
                driver.output(a)

    def _notice_allowed(self, bookie: str) -> bool:
        """A token of ``bookie``'s LAC notice bucket (NOTICES_PER_BOOKIE_PER_S, a burst of a
        tenth of a second), or False when it is empty."""
        now = time.monotonic()
        tokens, at = self._notice_tokens.get(bookie, (NOTICES_PER_BOOKIE_PER_S / 10, now))
        tokens = min(NOTICES_PER_BOOKIE_PER_S / 10, tokens + (now - at) * NOTICES_PER_BOOKIE_PER_S)
        if tokens < 1.0:
            self._notice_tokens[bookie] = (tokens, now)
            return False
        self._notice_tokens[bookie] = (tokens - 1.0, now)
        return True

    def _run_list(self, driver: Driver) -> None:
        try:
            event = A.BookiesListed(self._list_bookies())
        except Exception as exc:  # noqa: BLE001 - handed to the state machine
            event = A.MetadataFailed(None, _as_client_error(exc))
        self._post(driver, event)

    def _run_write(self, driver: Driver, action: A.WriteMetadata) -> None:
        try:
            event = self._write_metadata(action)
        except Exception as exc:  # noqa: BLE001 - handed to the state machine
            event = A.MetadataFailed(action, _as_client_error(exc))
        _log_metadata_write(driver, action, event)
        self._post(driver, event)

    def _post(self, driver: Driver, event) -> None:
        try:
            self.submit_to(driver, driver.event, event)
        except ClientClosedError:
            pass

    # -- sockets -------------------------------------------------------------------------------

    def _socket(self, bookie: str, kind: int):
        sock = self._sockets.get((bookie, kind))
        if sock is None:
            sock, proof = connect_proved(self._ctx, bookie, PORT_OFFSET[kind], self.curve,
                                         unbounded=True, keepalive=True, resolver=self.resolver)
            self._sockets[(bookie, kind)] = sock
            self._socket_keys[sock] = (bookie, kind)
            self._poller.register(sock, zmq.POLLIN)
            if proof is not None:  # None over a local socket: no key to prove
                self._proofs[proof.monitor] = (proof, bookie, kind)
                self._proof_of[sock] = proof
                self._poller.register(proof.monitor, zmq.POLLIN)
        return sock

    def _proof_event(self, monitor) -> None:
        """A handshake of a bookie's socket failed: the server there could not prove the key
        the bookie's registration publishes.  Nothing was sent to it; the bookie is down to
        this client (connection.Proof said so once), its requests fail now, and its
        registration is read again."""
        proof, bookie, kind = self._proofs[monitor]
        if not proof.failed():
            return
        self._suspects[bookie] = time.monotonic()
        self._reset_socket(bookie, kind)
        self.resolver.forget(bookie)

    SUSPECT_FOR_S = 60.0
    curve = None  # client/auth.py ClientCurve, set by the BookKeeper client when configured
    resolver = ADDRESSES_ONLY  # bookie id -> address (client/resolver.py), set by the client

    def bookie_moved(self, bookie: str) -> None:
        """The resolver saw ``bookie`` at a new address (any thread): drop its sockets, so the
        next request connects there.  Reads waiting on the old address are sent again to the
        new one (a read asks nothing of the bookie's state: sending it twice is harmless, and
        failing it would fail a reader whose replicas all moved at once); adds and LAC writes
        waiting there fail as timeouts, as for a bookie that went away (the writer's own rules
        decide what a lost add means)."""
        def reset() -> None:
            for kind in (ADD, READ, LAC):
                self._reset_socket(bookie, kind, resend=kind == READ)
        try:
            self.submit(reset)
        except ClientClosedError:
            pass  # closed meanwhile: no socket left to drop

    def suspect_bookies(self) -> frozenset:
        """Bookies that failed to answer lately (read from any thread: a snapshot)."""
        now = time.monotonic()
        return frozenset(b for b, t in list(self._suspects.items()) if now - t < self.SUSPECT_FOR_S)

    def _reset_socket(self, bookie: str, kind: int, resend: bool = False) -> None:
        """Drop the socket (and what ZeroMQ queued in it for a dead peer); every request still
        waiting on it fails now as a timeout, so one dead bookie costs one timeout, not many.
        With ``resend`` (the bookie moved) each is sent again instead, on a socket to where
        the bookie is now, with a whole timeout of its own."""
        sock = self._sockets.pop((bookie, kind), None)
        if sock is None:
            return
        self._poller.unregister(sock)
        del self._socket_keys[sock]
        proof = self._proof_of.pop(sock, None)
        if proof is not None:
            self._poller.unregister(proof.monitor)
            del self._proofs[proof.monitor]
            sock.disable_monitor()
            proof.close()
        sock.close(0)
        stale = [rid for rid, req in self._inflight.items() if req.key == (bookie, kind)]
        for rid in stale:
            req = self._inflight.pop(rid)
            self._release(req)
            if resend and not req.driver.over:
                driver, a, busy = req.driver, req.action, req.busy
                if isinstance(a, A.SendRead):
                    self.run_for(driver, self._send_read, driver, a, busy)
                else:
                    self.run_for(driver, self._send, driver, a)
                continue
            self.run_for(req.driver, req.driver.event, _response(req.action, A.TIMEOUT))

    def _send_read(self, driver: Driver, a: A.SendRead, busy=None) -> None:
        """Send a READ now, or hold it until its bookie has room (client/pacing.py)."""
        charge = self.pacer.admit(a.bookie, a.max_count)
        if not charge:
            return self.pacer.hold(a.bookie, (driver, a.max_count, a, busy))
        self._send(driver, a, charge=charge, busy=busy)

    def _release(self, req: _Request, answer=None) -> None:
        """A READ left flight (``answer``: its OK frames): charge back, held READs sent."""
        charge, req.charge = req.charge, 0
        if not charge:
            return  # not a READ, or released already
        self.pacer.learn(req.key[0], answer)
        for (driver, _, a, busy), again in self.pacer.release(req.key[0], charge):
            self.run_for(driver, self._send, driver, a, None, again, busy)

    def _refused_busy(self, req: _Request, now: float) -> bool:
        """A READ answered TOO_MANY_REQUESTS: True if it is sent again after a back-off."""
        (since, refusals), driver, a = req.busy or (now, 0), req.driver, req.action
        delay = None if driver.over else self.pacer.retry_delay(since, refusals, now)
        if delay is not None:
            self.later(delay, lambda: self._send_read(driver, a, (since, refusals + 1)), driver)
        return delay is not None

    def _send(self, driver: Driver, a, sizes=None, charge: int = 0, busy=None) -> None:
        rid = next(self._ids)
        now = time.monotonic()
        if isinstance(a, A.SendAdd):
            kind, timeout_s = ADD, self.add_timeout_s
            entries = a.entries
            if type(entries) is wire.EntryBatch and entries.packed:  # one buffer already
                lengths, data = entries.lengths_frame(), entries.data_frame()
            else:
                if sizes is None:
                    sizes = list(map(len, entries))
                lengths = np.array(sizes, dtype=wire.LENGTHS_DTYPE).tobytes()
                data = b"".join(entries)
            frames = [wire.pack_header(Op.ADD, Flag.RECOVERY_ADD | driver.key_flags if a.recovery
                                       else driver.add_flags, rid,
                                       driver.ledger_id),
                      driver.master_key, lengths, data]
        elif isinstance(a, A.SendRead):
            kind, timeout_s = READ, self.read_timeout_s
            flags, body = wire.read_request(a.first_entry_id, a.max_count, a.stride)
            frames = [wire.pack_header(Op.READ, flags, rid, driver.ledger_id), body]
        elif isinstance(a, A.SendReadLac):
            kind, timeout_s = READ, self.read_timeout_s
            flags = 0
            frames = [b""]
            if a.long_poll_after is not None:  # (with max_entries: the entries ride too)
                ms = int(min(a.timeout_s * 1000, wire.MAX_LONG_POLL_MS))
                flags, body = wire.long_poll_request(a.long_poll_after, ms, a.max_entries, a.max_bytes)
                frames.append(body)
                timeout_s += ms / 1000.0
            if a.fence:
                flags |= Flag.FENCE | driver.key_flags
                frames.append(driver.master_key)
                log.info("fencing ledger", extra={"fields": {"ledger_id": driver.ledger_id,
                                                             "bookie": a.bookie}})
            frames[0] = wire.pack_header(Op.READ_LAC, flags, rid, driver.ledger_id)
        elif isinstance(a, A.SendForce):
            kind, timeout_s = LAC, self.add_timeout_s
            frames = [wire.pack_header(Op.FORCE_LEDGER, 0, rid, driver.ledger_id)]
        else:  # SendWriteLac
            kind, timeout_s = LAC, self.add_timeout_s
            frames = [wire.pack_header(Op.WRITE_LAC, 0, rid, driver.ledger_id),
                      driver.master_key, wire.WRITE_LAC_BODY.pack(a.lac)]
        deadline = now + timeout_s
        self._inflight[rid] = req = _Request(driver, a, (a.bookie, kind), deadline, charge, busy)
        heapq.heappush(self._deadlines, (deadline, rid))
        if self.trace is not None and kind == ADD:
            self.trace.append(("io_sent", time.monotonic_ns()))
        try:
            wire_sockets.send_frames(self._socket(a.bookie, kind), frames, copy=len(frames[-1]) < 65536)
        except (zmq.ZMQError, UnresolvedBookieError) as exc:
            log.debug("send to %s failed: %s", a.bookie, exc)
            del self._inflight[rid]
            self._release(req)
            self._suspects[a.bookie] = time.monotonic()
            driver.event(_response(a, A.UNREACHABLE))
            self._reset_socket(a.bookie, kind)
            self.resolver.forget(a.bookie)  # registered again, or elsewhere, meanwhile?

    def _flush(self) -> None:
        """Send what ``execute`` merged: per (driver, bookie, recovery) as few ADD messages as
        the batch limits allow, cut at entry boundaries (sizes summed in C, cuts by bisect)."""
        while self._outbox:
            outbox, self._outbox = self._outbox, {}
            for (driver, bookie, recovery), (ids, entries) in outbox.items():
                self.run_for(driver, self._send_adds, driver, bookie, recovery,
                             _merged_ids(ids), _merged(entries))

    def _send_adds(self, driver: Driver, bookie: str, recovery: bool, ids, entries) -> None:
        """One driver's merged adds to one bookie, in as few messages as the limits allow."""
        if self.trace is not None:
            self.trace.append(("io_take", time.monotonic_ns()))
        max_n, max_b = self._batch_entries, self._batch_bytes
        n = len(ids)
        if type(entries) is wire.EntryBatch and entries.packed:
            if n and n <= max_n and int(entries.ends[-1] - entries.starts[0]) <= max_b:
                self._send(driver, A.SendAdd(bookie, ids, entries, recovery))
                return
            sizes = (entries.ends - entries.starts).tolist()
        else:
            sizes = list(map(len, entries))
            if n <= max_n and sum(sizes) <= max_b:
                self._send(driver, A.SendAdd(bookie, ids, entries, recovery), sizes)
                return
        ends = list(itertools.accumulate(sizes))
        start, base = 0, 0
        while start < n and not driver.over:
            end = bisect.bisect_right(ends, base + max_b, start, min(n, start + max_n))
            end = max(end, start + 1)  # an entry over max_b still goes, alone
            self._send(driver, A.SendAdd(bookie, ids[start:end], entries[start:end],
                                         recovery), sizes[start:end])
            base = ends[end - 1]
            start = end

    def _receive(self, sock) -> None:
        key = self._socket_keys.get(sock)
        for _ in range(1024):
            try:
                frames = wire_sockets.recv_frames(sock, copy=False)
            except zmq.Again:
                return
            try:
                _op, status, rid, _lid = wire.unpack_header(frames[0].bytes)
            except wire.ProtocolError:
                log.warning("malformed response from %s", key)
                continue
            if self.trace is not None and _op == Op.ADD:
                self.trace.append(("io_recv", time.monotonic_ns()))
            req = self._inflight.pop(rid, None)
            if req is None:
                continue  # answered after its timeout
            if self._suspects and key[0] in self._suspects:
                del self._suspects[key[0]]
            if req.charge:
                self._release(req, frames if status == 0 else None)
                if status == wire.Status.TOO_MANY_REQUESTS and self._refused_busy(req, time.monotonic()):
                    continue
            self.run_for(req.driver, _deliver_answer, req, status, frames)
            self._busy = True  # a caller woken by this answer may hand over more soon

    def _expire(self, now: float) -> None:
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            _, rid = heapq.heappop(dl)
            req = self._inflight.pop(rid, None)
            if req is None:
                continue
            self._release(req)
            if req.driver.over:
                # Its operation ended without it (a speculative read got the entries from
                # another replica): resetting the socket now would fail the requests sent on it
                # since, to a bookie that may be back by now.
                continue
            self._suspects[req.key[0]] = now
            self.run_for(req.driver, req.driver.event, _response(req.action, A.TIMEOUT))
            self._reset_socket(*req.key)
            self.resolver.forget(req.key[0])  # it may have moved: read its registration again
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, driver, fn = heapq.heappop(timers)
            self.run_for(driver, fn)

    def _stop(self) -> None:
        self._running = False

    def _spin(self) -> list:
        """After a turn that did work, look again without sleeping for ``idle_spin_s``
        (core/idle.py): the caller that got an answer often hands over its next add within it,
        and this thread then takes it without being woken.  Meanwhile ``_woken`` stays set, so
        a ``submit`` writes no eventfd; it is cleared before the inbox is looked at a last time
        (a submit after that wakes the blocking poll as before).  Returns the poll's events,
        or [] when the inbox got work or the spin ran out (the caller then polls as before).
        The bookie's loops spin the same way (bookie.core.idle, which the client does not
        import): the first tenth back to back, the rest yielding the CPU between looks, and
        parking at once when a gap between two looks shows another thread had the CPU; no spin
        while the host's 1-minute load average is at its core count or above."""
        inbox, poller = self._inbox, self._poller
        now = last = time.perf_counter()
        if now - self._load_seen_at >= 1.0:  # no spin while the host's load fills its cores
            self._load_seen_at = now
            self._host_busy = os.getloadavg()[0] >= len(os.sched_getaffinity(0))
        if self._host_busy:
            return []
        self._woken = True
        yield_at, end = now + self._idle_spin_s / 10, now + self._idle_spin_s
        while not inbox:
            events = poller.poll(0)
            if events:
                return events
            now = time.perf_counter()
            if now >= end or now - last >= SPIN_PREEMPTED_S:  # out of time, or lost the CPU
                break
            last = now
            if now >= yield_at:
                os.sched_yield()
        self._woken = False
        return []

    def _turn(self) -> None:
        """One loop iteration: wait for sockets, the wake-up or the next deadline; take the
        answers, run what was submitted, expire deadlines and timers, send merged adds."""
        inbox = self._inbox
        wait_ms = 1000
        if self._deadlines or self._timers:
            nxt = min(self._deadlines[0][0] if self._deadlines else float("inf"),
                      self._timers[0][0] if self._timers else float("inf"))
            wait_ms = max(0, min(1000, int((nxt - time.monotonic()) * 1000) + 1))
        events = None
        if inbox or self._outbox:
            wait_ms = 0
        elif self._busy and self._idle_spin_s > 0:
            events = self._spin()
            if inbox:
                wait_ms = 0
        self._busy = False
        for sock, _ in events or self._poller.poll(wait_ms):
            if sock == self._wake_fd:
                try:
                    os.eventfd_read(self._wake_fd)
                except BlockingIOError:
                    pass
            elif sock in self._proofs:
                self._proof_event(sock)
            else:
                self._receive(sock)
        self._woken = False  # before draining: a later submit wakes us again
        for _ in range(len(inbox)):
            driver, fn, args = inbox.popleft()
            self.run_for(driver, fn, *args)
        self._expire(time.monotonic())
        self._flush()

    def _run(self) -> None:
        self._ctx = zmq.Context()
        self._poller = zmq.Poller()
        self._poller.register(self._wake_fd, zmq.POLLIN)
        self._running = True
        self._started.set()
        inbox = self._inbox
        try:
            while self._running:
                try:
                    self._turn()
                except Exception:  # noqa: BLE001 - the last line of defence: the loop goes on
                    log.exception("unexpected error in the client's I/O loop")
        finally:
            with self._wake_lock:
                self._closing = True
            error = ClientClosedError("the BookKeeper client was closed while this operation "
                                      "was in flight")
            for driver in list(self._drivers):
                try:
                    driver.abort(error)
                except Exception:  # noqa: BLE001
                    log.exception("error aborting an operation")
            while inbox:
                inbox.popleft()
            for proof in list(self._proof_of.values()):
                proof.close()
            for sock in list(self._socket_keys):
                sock.close(0)
            self._ctx.term()
            os.close(self._wake_fd)


def _log_metadata_write(driver, action, event) -> None:
    """Ensemble changes, recoveries and closes, as operators read them (``bookie.client``;
    bookie.workers.logs.LineFormatter renders ``fields`` as key=value)."""
    info = action.info
    fields = {"ledger_id": info.ledger_id, "purpose": action.purpose}
    if isinstance(event, A.MetadataFailed):
        log.warning("ledger metadata write failed", extra={"fields": {**fields, "error": str(event.error)}})
        return
    if isinstance(event, A.MetadataConflict):
        log.info("ledger metadata changed meanwhile; retrying", extra={"fields": fields})
        return
    recovering = type(driver.op).__name__ == "RecoveryOp"
    if action.purpose == "ensemble":
        first_entry_id, ensemble = info.fragments[-1]
        previous = info.fragments[-2][1] if len(info.fragments) > 1 else ()
        replaced = [f"{old}->{new}" for old, new in zip(previous, ensemble) if old != new]
        log.warning("ensemble changed", extra={"fields": {
            "ledger_id": info.ledger_id, "from_entry_id": first_entry_id,
            "replaced": ",".join(replaced), "ensemble": ",".join(ensemble)}})
    elif action.purpose == "recovery":
        log.info("ledger recovery started", extra={"fields": {"ledger_id": info.ledger_id}})
    elif recovering:
        log.info("ledger recovered and closed", extra={"fields": {
            "ledger_id": info.ledger_id, "last_entry_id": info.last_entry_id, "length": info.length}})
    else:
        log.debug("ledger closed", extra={"fields": {
            "ledger_id": info.ledger_id, "last_entry_id": info.last_entry_id}})


def _merged_ids(parts: list):
    """The entry ids of merged SendAdds: one range when each part follows the one before (so
    the answer is counted per run, PendingAdds.ack), else a list."""
    if len(parts) == 1:
        return parts[0]
    if all(type(p) is range and p.step == 1 for p in parts) and \
            all(a.stop == b.start for a, b in zip(parts, parts[1:])):
        return range(parts[0].start, parts[-1].stop)
    return list(itertools.chain.from_iterable(parts))


def _merged(parts: list):
    """The formatted entries of merged SendAdds: one EntryBatch (the frames copied once, no
    entry touched) when all are packed batches, else a list."""
    if len(parts) == 1:
        return parts[0]
    if all(type(p) is wire.EntryBatch and p.packed for p in parts):
        return wire.EntryBatch.concat(parts)
    return list(itertools.chain.from_iterable(parts))


def _response(action, status: int, frames=()):
    if isinstance(action, A.SendAdd):
        return A.AddResponse(action, status)
    if isinstance(action, A.SendRead):
        return A.ReadResponse(action, status)
    if isinstance(action, A.SendReadLac):
        return A.LacResponse(action, status)
    if isinstance(action, A.SendForce):
        return A.ForceResponse(action, status)
    return A.WriteLacResponse(action, status)


def _deliver_answer(req: _Request, status: int, frames) -> None:
    req.driver.event(_decode(req.action, status, frames[1:]))


def _decode(action, status: int, frames):
    if status != wire.Status.OK:
        return _response(action, status)
    try:
        if isinstance(action, A.SendRead):
            lengths, data = frames[0].buffer, frames[1].bytes  # one copy; entries slice it
            if len(lengths) % 4 or int(np.frombuffer(lengths, wire.LENGTHS_DTYPE).sum(
                    dtype=np.int64)) != len(data):
                raise wire.ProtocolError("entry lengths do not add up to the data frame")
            return A.ReadResponse(action, status, A.RawEntries(lengths, data))
        if isinstance(action, A.SendReadLac):
            lac, last = wire.LAC_BODY.unpack(frames[0].buffer)
            entries = A.RawEntries.checked(frames[1].buffer, frames[2].bytes) if len(frames) > 2 else None
            return A.LacResponse(action, status, lac, last, entries)  # entries: a poll's, WITH_ENTRIES
    except (IndexError, ValueError, wire.ProtocolError) as exc:
        log.warning("malformed answer to %s: %s", action, exc)
        return _response(action, int(wire.Status.BAD_REQUEST))
    return _response(action, status)


def _as_client_error(exc: Exception) -> BookKeeperError:
    """A metadata call's failure as the event's error (store errors arrive translated)."""
    if isinstance(exc, BookKeeperError):
        return exc
    log.error("unexpected error in a metadata call", exc_info=exc)
    return BookKeeperError(f"metadata call failed unexpectedly: {exc!r}")
