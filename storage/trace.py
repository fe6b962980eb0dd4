"""Per-add timestamp files of the add and journal workers (opt-in: ``addTraceDirectory``).

Theory of operation
-------------------
``bookie bench bookie --trace`` breaks a lone add's latency into steps.  The client-side steps
it stamps itself; the bookie-side ones come from here: with ``addTraceDirectory`` set, the add
worker appends one line per answered ADD to ``add.trace`` and the journal worker one line per
written group to ``journal.trace``.  Every stamp is ``time.monotonic_ns()`` (CLOCK_MONOTONIC,
one clock for every process of the machine), so the bench lines them up with its own.

Lines (decimal integers, space-separated, one write each):

- ``add.trace``: ``ledger_id first_entry_id ring_end received_ns placed_ns replied_ns``:
  the ADD taken off the socket, its checks done and its record about to be copied into the ring
  (ending at logical position ``ring_end``; stamped before the copy, which rings the journal), its answer about to be handed to ZeroMQ (stamped before the send: a stamp
  after it could come later than the client's receipt when the worker is preempted).
- ``journal.trace``: ``durable_end done_ns group_ns sync_ns``: a group that made the ring
  durable up to ``durable_end`` was written and synced by ``done_ns``; the group took
  ``group_ns`` (write + fdatasync), the fdatasync ``sync_ns``.

Ring positions are per journal: with several journals (``journalDirectories``) lines of
different journals may carry the same position, so the bench traces a bookie of one journal.

Off (the default), nothing here runs: the workers hold ``None`` and test it once per answered
add or written group.
"""

from __future__ import annotations

import dataclasses
import os

ADD_FILE = "add.trace"
JOURNAL_FILE = "journal.trace"


class TraceFile:
    """Appends lines of integers to one trace file."""

    def __init__(self, directory: str, name: str):
        os.makedirs(directory, exist_ok=True)
        self._fd = os.open(os.path.join(directory, name),
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def write(self, *values: int) -> None:
        os.write(self._fd, (" ".join(map(str, values)) + "\n").encode("ascii"))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_trace(directory: str, name: str) -> TraceFile | None:
    """The trace file ``name`` in ``directory``; None when tracing is off (no directory)."""
    return TraceFile(directory, name) if directory else None


class AddTrace:
    """The add worker's side: remembers when each placed ADD arrived and was placed, and writes
    its line once it is answered.  Keyed by the record's ring end (unique per placed record)."""

    def __init__(self, out: TraceFile):
        self.out = out
        self._placed: dict[int, tuple[int, int, int, int]] = {}

    def placed(self, ring_end: int, ledger_id: int, first_entry_id: int, received_s: float,
               now_ns: int) -> None:
        self._placed[ring_end] = (ledger_id, first_entry_id, int(received_s * 1e9), now_ns)

    def replied(self, ring_end: int, now_ns: int) -> None:
        placed = self._placed.pop(ring_end, None)
        if placed is not None:
            ledger_id, first, received_ns, placed_ns = placed
            self.out.write(ledger_id, first, ring_end, received_ns, placed_ns, now_ns)

    def close(self) -> None:
        self.out.close()


@dataclasses.dataclass(frozen=True)
class AddStamp:
    ledger_id: int
    first_entry_id: int
    ring_end: int
    received_ns: int
    placed_ns: int
    replied_ns: int


@dataclasses.dataclass(frozen=True)
class GroupStamp:
    durable_end: int
    done_ns: int
    group_ns: int
    sync_ns: int


def _rows(path: str, width: int):
    if not os.path.exists(path):
        return
    with open(path, encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) == width:  # a line torn by a killed worker is skipped
                yield [int(p) for p in parts]


def read_adds(directory: str) -> list[AddStamp]:
    return [AddStamp(*row) for row in _rows(os.path.join(directory, ADD_FILE), 6)]


def read_groups(directory: str) -> list[GroupStamp]:
    return [GroupStamp(*row) for row in _rows(os.path.join(directory, JOURNAL_FILE), 4)]
