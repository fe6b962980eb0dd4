"""Where the add worker puts what its machine accepted (bookie.core.adds ``PlaceAdd``,
``PlaceRecord``, ``AnswerAt``): the record into its journal's ring, the journal woken, the record
applied to the ledger table, its bytes into the entry log - or held, in order, while the ledger
disks have no room (storage/noroom.py) - and its answer held back (bookie.core.answers); then
the iteration's index commit, which moves ``safe_to``, and the LastLogMark a checkpoint may
persist.  The no-room state itself (read-only, when to retry) is the machine's.
"""

from __future__ import annotations

import collections
import time

from bookie import wire
from bookie.core.adds import FENCE, AddMachine, AnswerAt, NoRoom, PlaceAdd, PlaceRecord, ReadOnly, RoomAgain
from bookie.core.answers import JournalAnswers, Pending
from bookie.storage import records
from bookie.storage.journal_set import journal_of
from bookie.storage.noroom import Held, HeldRecord, no_room
from bookie.storage.ring import DURABLE, NO_ROOM, WRITE
from bookie.wire import Op, Status


class Placer:
    """The add worker's records on their way to the journal and the ledger disks (module
    docstring).  ``stats``: the worker's counters; ``trace``: per-add timestamps or None."""

    def __init__(self, log, rings, wakes, storage, machine: AddMachine, pending: JournalAnswers,
                 checkpointer, stats, trace=None):
        self.log = log
        self.rings = rings  # journal i's at [i]; rings[0] also holds the control words
        self.journals = len(rings)
        self.wakes = wakes
        self.storage = storage
        self.machine = machine
        self.pending = pending
        self.checkpointer = checkpointer
        self.stats = stats
        self.trace = trace
        # per journal: end of what is in the entry log and index (noroom.py)
        self.safe_to = [r.get(WRITE) for r in rings]
        self.held: collections.deque[Held] = collections.deque()
        self.rung: set[int] = set()  # journals woken this iteration
        self.unrung: set[int] = set()  # ... and placed in since
        self.moved: set[int] = set()  # ledgers with adds / WRITE_LACs placed since the last publish
        self.deferred_waiting = False  # a DEFERRED_SYNC add's answer was held this iteration
        self.lac_taken = False  # a WRITE_LAC was placed: the loop ends its iteration after it

    def place_add(self, a: PlaceAdd) -> None:
        r, o = a.request, a.request.token
        ledger_id = r.ledger_id
        parts, size, data_offset = records.add_batch_parts(ledger_id, a.key, a.lengths_frame, a.data,
                                                           flags=a.flags)
        checked_ns = time.monotonic_ns() if self.trace is not None else 0
        start, end = self.place(a.journal, parts, wake=a.wake)
        if self.trace is not None:
            self.trace.placed(end, ledger_id, int(a.entry_ids[0]), o.taken_at, checked_ns)
        self.storage.table.apply(records.Record(records.ADD_BATCH, a.flags, ledger_id, a.key, -1,
                                                a.lengths, data_offset, size))
        self.store(ledger_id, start, end, size, data_offset, a.entry_ids, a.lengths, a.offsets)
        self.moved.add(ledger_id)
        self.deferred_waiting |= a.deferred
        self.pending.append(Pending(end, [o.ident, wire.pack_header(Op.ADD, Status.OK, o.request_id, ledger_id)],
                                    ledger_id, Op.ADD, o.taken_at, a.journal, a.deferred), a.principal)
        stats = self.stats
        stats["add_entries_total"] += len(a.entry_ids)
        stats["add_bytes_total"] += len(a.data)
        stats["add_requests_total"] += 1

    def place_record(self, a: PlaceRecord) -> None:
        """A fence (answered to the read worker once durable: DESIGN invariant 4) or a LAC."""
        r, o = a.request, a.request.token
        ledger_id = r.ledger_id
        if a.lac is None:
            rec = records.fence_record(ledger_id, a.key, a.flags)
        else:
            rec = records.lac_record(ledger_id, a.lac, a.key, a.flags)
        _, end = self.place(a.journal, [rec])
        if self.storage.table.apply(records.parse(rec, 0)):
            self.store_record(ledger_id, rec)
        if a.lac is None:
            self.stats["fences_total"] += 1
            self.pending.append(Pending(end, [None, o.ident, b"F", o.request_id, wire.STATUS.pack(Status.OK)],
                                        ledger_id, FENCE, o.taken_at, a.journal), None)
            return
        self.moved.add(ledger_id)
        self.lac_taken = True
        self.pending.append(Pending(end, [o.ident, wire.pack_header(Op.WRITE_LAC, Status.OK, o.request_id, ledger_id)],
                                    ledger_id, Op.WRITE_LAC, o.taken_at, a.journal), a.principal)

    def hold(self, a: AnswerAt) -> None:
        """Hold an answer that places nothing (an add of entries all held already, a force)."""
        r, o = a.request, a.request.token
        end = self.rings[a.journal].get(WRITE) if a.end is None else a.end
        self.pending.append(Pending(end, [o.ident, wire.pack_header(r.op, Status.OK, o.request_id, r.ledger_id)],
                                    r.ledger_id, r.op, o.taken_at, a.journal), a.principal)
        if a.duplicates:
            self.stats["add_duplicates_total"] += a.duplicates
        if a.wake:  # a force: the deferred records before it were placed without a wake-up
            self.unrung.add(a.journal)

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
        """Each journal's LastLogMark a checkpoint may persist now.  Call after ``commit``:
        every record placed before WRITE is then in the entry log and the index, and a mark
        never passes what its journal made durable (a journal must never restart below it)."""
        return [min(s, r.get(DURABLE)) for s, r in zip(self.safe_to, self.rings)]

    # -- no room on the ledger disks (storage/noroom.py) -----------------------------------------
    def commit(self, final: bool = False) -> set[int] | None:
        """Commit the index; on want of space turn read-only, and retry while read-only.
        Returns the ledgers the GC deleted under this commit's records (None: no commit ran)."""
        now = time.monotonic()
        if not self.machine.commit_due(now, final):
            return None
        try:
            while self.held:
                self.held[0].store(self.storage)
                self.held.popleft()
            gone = self.storage.commit()
        except Exception as e:  # noqa: BLE001 - only want of space is survived
            if not no_room(e):
                raise
            self.turn_full(e)
            return None
        if gone:
            self.machine.deleted(gone)
        self.safe_to = [r.get(WRITE) for r in self.rings]
        if self.checkpointer.no_room:
            self.turn_full(None)
        elif self.machine.full and not self.checkpointer.failed:
            self.act(self.machine.handle(RoomAgain(), now))
        return gone

    def turn_full(self, e) -> None:
        self.act(self.machine.handle(NoRoom(), time.monotonic()),
                 error=str(e) if e else "checkpoint failed")

    def act(self, actions, error: str = "") -> None:
        """Carry out the machine's actions about the bookie's state (core/adds.py)."""
        for a in actions:
            if type(a) is ReadOnly:
                self.rings[0].set(NO_ROOM, 1 if a.on else 0)  # the supervisor turns the bookie read-only
                if a.on:
                    self.log("no room on the ledger disks; read-only until there is", error=error)
                else:
                    self.log("ledger disks have room again; taking adds",
                                 position=",".join(map(str, self.safe_to)))

    def store(self, ledger_id, start, end, size, data_offset, entry_ids, lengths, offsets) -> None:
        """Write a placed record to the entry log, or hold it while there is no room."""
        slices = self.rings[journal_of(ledger_id, self.journals)].slices(start, end)
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
