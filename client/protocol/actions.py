"""Events fed to the protocol state machines and the actions they ask the I/O layer to take.

A state machine never touches a socket, a clock or the metadata store: the I/O layer turns
actions into wire requests, store calls and timers, and feeds what comes back as events.
Every request action is handed back unchanged in its response event, so an operation knows
what it asked for without keeping its own table of request ids.
"""

from __future__ import annotations

import dataclasses

from bookie.client.errors import BookKeeperError
from bookie.client.protocol.ledger import LedgerInfo
from bookie.wire import Status, check_entry_frames, split_batch

# Pseudo statuses next to wire.Status: no answer in time, or the request could not be sent.
TIMEOUT = -1
UNREACHABLE = -2


def status_name(status: int) -> str:
    """A status for messages: the wire name, or timeout / unreachable."""
    if status == TIMEOUT:
        return "timeout"
    if status == UNREACHABLE:
        return "unreachable"
    try:
        return Status(status).name
    except ValueError:
        return f"status {status}"


# ---- actions -----------------------------------------------------------------------------------

@dataclasses.dataclass(slots=True)
class SendAdd:
    """Write ``entries`` (formatted, ids ``entry_ids``) to ``bookie``; the I/O layer may merge
    consecutive SendAdds of one operation to one bookie into a single ADD message."""
    bookie: str
    entry_ids: list
    entries: list
    recovery: bool = False
    delay_s: float = 0.0


@dataclasses.dataclass(slots=True)
class SendRead:
    """READ up to ``max_count`` entries from ``first_entry_id`` on ``bookie``, every
    ``stride``-th one (1: consecutive entries)."""
    bookie: str
    first_entry_id: int
    max_count: int
    stride: int = 1


@dataclasses.dataclass(slots=True)
class SendReadLac:
    """READ_LAC from ``bookie``; ``fence`` fences the ledger there first; ``long_poll_after``
    (when not None) makes the bookie wait until its LAC passes that entry id, and with
    ``max_entries`` > 0 answer with the entries after it up to that LAC too (at most
    ``max_entries`` and ``max_bytes``: wire.py WITH_ENTRIES)."""
    bookie: str
    fence: bool = False
    long_poll_after: int | None = None
    timeout_s: float = 0.0
    max_entries: int = 0
    max_bytes: int = 0


@dataclasses.dataclass(slots=True)
class SendWriteLac:
    """Tell a bookie the writer's LAC (explicit LAC, LAC notice).  The I/O thread sends it on a
    connection of its own to the bookie's add socket, never behind queued ADDs.  ``notice``:
    a LAC notice (writer.py ``_notice``), which the I/O thread may drop past its budget."""
    bookie: str
    lac: int
    notice: bool = False


@dataclasses.dataclass(slots=True)
class SendForce:
    """FORCE_LEDGER to a bookie (deferred sync: make the ledger's entries there durable), on
    the explicit-LAC connection to its add socket; answered by ForceResponse."""
    bookie: str


@dataclasses.dataclass(slots=True)
class TickAfter:
    """Give the operation a Tick after ``delay_s`` (a rate-limited step that is due later)."""
    delay_s: float


@dataclasses.dataclass(slots=True)
class Suspect:
    """``bookie`` left a request unanswered for long (a speculative read went elsewhere): later
    reads should start on other replicas until it answers again."""
    bookie: str


@dataclasses.dataclass(slots=True)
class Confirm:
    """Entries ``first``..``last`` are acknowledged to the caller, in this order."""
    first: int
    last: int


@dataclasses.dataclass(slots=True)
class FailAdds:
    """Entries ``first``..``last`` failed with ``error`` (completed in order, after Confirms)."""
    first: int
    last: int
    error: BookKeeperError


@dataclasses.dataclass(slots=True)
class Forced:
    """A ``force`` of the writer is done: every entry up to ``last`` is acknowledged (durable)
    and the LAC advanced to it; or it failed with ``error`` (forces complete in order)."""
    last: int
    error: BookKeeperError | None = None


@dataclasses.dataclass(slots=True)
class ListBookies:
    """Ask the metadata store for the writable bookies (answer: BookiesListed)."""


@dataclasses.dataclass(slots=True)
class WriteMetadata:
    """CAS-write ``info`` at ``version`` (answer: MetadataWritten or MetadataConflict)."""
    info: LedgerInfo
    version: object
    purpose: str  # "ensemble" or "close"


@dataclasses.dataclass(slots=True)
class Finished:
    """The operation is over: ``result`` for its caller, or ``error``."""
    result: object = None
    error: BookKeeperError | None = None


# ---- events ------------------------------------------------------------------------------------

@dataclasses.dataclass(slots=True)
class AddResponse:
    request: SendAdd
    status: int


class RawEntries:
    """The entries of a READ answer as they travel: a lengths frame (u32 little-endian, one
    per entry) and the entries back to back.  A sequence of the formatted entries (memoryviews,
    split on demand); a decoder that knows the layout (``DigestManager.decode_many``) takes
    the two frames whole instead, without an object per entry."""

    __slots__ = ("lengths", "data")

    def __init__(self, lengths, data):
        self.lengths, self.data = lengths, data

    @classmethod
    def checked(cls, lengths, data) -> "RawEntries":
        """The entries of an answer's two frames, once their lengths add up to the data.

        Raises:
            wire.ProtocolError: they do not.
        """
        check_entry_frames(lengths, len(data))
        return cls(lengths, data)

    def __len__(self) -> int:
        return len(self.lengths) // 4

    def __iter__(self):
        return iter(split_batch(self.lengths, self.data))

    def __getitem__(self, i):
        return split_batch(self.lengths, self.data)[i]


@dataclasses.dataclass(slots=True)
class ReadResponse:
    """``entries``: the formatted entries returned (a sequence, often ``RawEntries``; empty
    unless status is OK)."""
    request: SendRead
    status: int
    entries: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class LacResponse:
    """``entries``: a WITH_ENTRIES poll's entries as they travel (``RawEntries``, maybe
    empty), not yet checked; None for an answer without them."""
    request: SendReadLac
    status: int
    lac: int = -1
    last_entry_id: int = -1
    entries: object = None


@dataclasses.dataclass(slots=True)
class WriteLacResponse:
    request: SendWriteLac
    status: int


@dataclasses.dataclass(slots=True)
class ForceResponse:
    request: SendForce
    status: int


@dataclasses.dataclass(slots=True)
class BookiesListed:
    writable: list


@dataclasses.dataclass(slots=True)
class MetadataWritten:
    request: WriteMetadata
    version: object


@dataclasses.dataclass(slots=True)
class MetadataConflict:
    """The CAS failed; ``info``/``version`` are the re-read metadata."""
    request: WriteMetadata
    info: LedgerInfo
    version: object


@dataclasses.dataclass(slots=True)
class MetadataFailed:
    request: object
    error: BookKeeperError


@dataclasses.dataclass(slots=True)
class Tick:
    """Time passed (drives explicit LAC writes and speculative reads)."""
