"""An answer of the add worker held back until the journal has made its record durable."""

from __future__ import annotations

from bookie import wire
from bookie.wire import Op, Status


class Pending:
    """An answer held back until the journal has made its record durable (DESIGN invariants 1
    and 4).  ``reply`` is the client's frames, or ``[None, *frames]`` for the read worker."""

    __slots__ = ("end", "reply", "ledger_id", "op", "status", "taken_at", "journal")

    def __init__(self, end: int, reply: list, ledger_id: int, op: int = Op.ADD, taken_at: float = 0.0,
                 journal: int = 0):
        self.end = end  # in journal ``journal``'s logical offsets (each journal has its own)
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
