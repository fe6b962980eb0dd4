"""An answer of the add worker held back until the journal has made its record durable."""

from __future__ import annotations

from bookie import wire
from bookie.wire import Op, Status
from bookie.core.shares import PendingAdds

ADMITTED = object()  # ``JournalAnswers.append``: count to the principal last admitted


class Pending:
    """An answer held back until the journal has made its record durable (DESIGN invariants 1
    and 4).  ``reply`` is the client's frames, or ``[None, *frames]`` for the read worker."""

    __slots__ = ("end", "reply", "ledger_id", "op", "status", "taken_at", "journal", "deferred")

    def __init__(self, end: int, reply: list, ledger_id: int, op: int = Op.ADD, taken_at: float = 0.0,
                 journal: int = 0, deferred: bool = False):
        self.end = end  # in journal ``journal``'s logical offsets (each journal has its own)
        # a DEFERRED_SYNC add's answer: it leaves once its record is stored, durable or not
        # (core/adds.py invariant 6)
        self.deferred = deferred
        self.journal = journal
        self.reply = reply
        self.ledger_id = ledger_id
        self.op = op
        self.status = Status.OK
        self.taken_at = taken_at  # time.monotonic() when the request was taken off its socket

    def refuse(self, status: Status) -> None:
        """Answer ``status`` instead of OK (the ledger turned out to be deleted)."""
        self.status = status
        if self.reply[0] is None:  # a fence for the read worker: its status is the last frame
            self.reply[-1] = wire.STATUS.pack(status)
        else:
            _, _, op, _, _, request_id, ledger_id = wire.HEADER.unpack(self.reply[1])
            self.reply[1] = wire.pack_header(op, status, request_id, ledger_id)


class JournalAnswers:
    """The add worker's held-back answers with several journals: one ``PendingAdds`` queue per
    journal, so an answer waits for its own journal's DURABLE only (a slow journal holds back
    no answer of another), over one count of places per principal for all journals (the
    share is the bookie's, not a journal's).

    Invariant: answers of one journal leave in the order they were appended; every record of
    a ledger is in one journal (storage/journal_set.py), so a ledger's answers keep their order.
    ``admit`` a client request on the queue of its ledger's journal before appending its answer
    there (``PendingAdds`` counts the place to the principal it admitted).
    """

    def __init__(self, journals: int, max_pending: int, principal, refusals=None):

        self.queues = [PendingAdds(max_pending, principal, refusals) for _ in range(journals)]
        for q in self.queues[1:]:
            q.held = self.queues[0].held  # one count of places per principal

    def admit(self, journal: int, frame, ident, op: int):
        """``PendingAdds.admit`` on the journal's queue; returns the principal the request's
        answer counts to (None: it counts to nobody; pass it to ``append``)."""
        q = self.queues[journal]
        q.admit(frame, ident, op)
        return q.current

    def append(self, pending: Pending, principal=ADMITTED) -> None:
        """Hold ``pending`` on its journal's queue, its place counted to ``principal``: what
        ``admit`` returned for its request (the add machine decides requests that waited after
        others were admitted, so it says whose each is); by default the principal the queue's
        last ``admit`` named (admitted just before)."""
        q = self.queues[pending.journal]
        if principal is not ADMITTED:
            q.current = principal
        q.append(pending)

    def durable(self, durable: list[int], stored: list[int] | None = None):
        """Take off (and yield) each journal's answers whose record ends at or before that
        journal's ``durable[journal]``, in each journal's order; with ``stored``, a deferred
        answer at the head of its queue leaves once its record ends at or before
        ``stored[journal]`` (durable or not: core/adds.py invariant 6).  ``durable`` is then
        ``min(DURABLE, stored)`` per journal: every answer needs its record stored."""
        if stored is None:
            for q, upto in zip(self.queues, durable):
                while q and q[0].end <= upto:
                    yield q.popleft()
            return
        for q, upto, safe in zip(self.queues, durable, stored):
            while q and (q[0].end <= upto or (q[0].deferred and q[0].end <= safe)):
                yield q.popleft()

    def durable_refusing(self, durable: list[int], stored: list[int], status: Status):
        """``durable`` while the records past ``stored[journal]`` may not be stored for a
        while (no room: core/adds.py invariant 5): the answers leave in each journal's order
        once their record is durable, and a client answer whose record is not stored yet is
        turned into ``status`` first (a fence's and a force's answers stay as they are)."""
        for q, upto, safe in zip(self.queues, durable, stored):
            while q and q[0].end <= upto:
                p = q.popleft()
                if (p.end > safe and p.reply[0] is not None and p.status == Status.OK
                        and p.op != Op.FORCE_LEDGER):  # a force makes nothing readable
                    p.refuse(status)
                yield p

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues)

    def __bool__(self) -> bool:
        return any(self.queues)

    def __iter__(self):
        for q in self.queues:
            yield from q
