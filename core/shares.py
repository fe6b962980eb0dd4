"""What one client may hold of a worker's pending places: its principal, and its share.

Theory of operation
-------------------
The add worker holds at most ``maxPendingAddRequestsPerThread`` answers waiting for the journal,
the read worker at most ``maxPendingReadRequestsPerThread`` long polls plus fences waiting.  One
client must not take every place, or every other client gets TOO_MANY_REQUESTS.  "One client"
is counted twice: per connection (the ROUTER identity), and per principal, since one client may
open many connections.  Each may hold at most ``share(limit)``, a quarter of the places
(docs/security.md "Limits"): a principal with four connections or more still leaves three
quarters to the others.

The principal of a request (``principal_of``):

- under CURVE, the enrolled key itself (z85): the User-Id the ZAP handler gave the connection
  (workers/auth.py), which every message of the connection carries;
- without CURVE, the peer's IP address (``Peer-Address``), so one host's connections share one
  share, loopback too: four connections of one local process no longer take every place (each
  of 127.0.0.1's connections used to be a principal of its own).  A local process can still
  connect from other addresses of 127.0.0.0/8 to count as several hosts (docs/security.md,
  "Not yet protected"); local clients use the local sockets instead, where the kernel names
  them.  The test fixtures need no exemption: their clients stay far below a quarter of the
  places.  Only an inproc peer counts as its connection;
- over a local socket (ipc), the peer's uid as the ZAP handler named it, ``uid:N``
  (workers/local_sockets.py): one uid's connections share one share, whatever their number.

Reading a message property costs about 0.7 us (``zmq_msg_gets``), so it is read only for the
requests that take a place (adds, WRITE_LACs, long polls, fences), never for a plain READ.
"""

from __future__ import annotations

import collections

from bookie import wire
from bookie.wire import Status

SHARE_DIVISOR = 4  # one connection, or one principal, holds at most a quarter of the places


def share(limit: int) -> int:
    """The places of ``limit`` one connection or one principal may hold."""
    return max(1, limit // SHARE_DIVISOR)


def curve_principal(frame, ident):
    """The principal of a request under CURVE: its enrolled key."""
    return frame.get("User-Id")


def address_principal(frame, ident):
    """The principal of a request without CURVE: the peer's address, loopback included (the
    module doc says why)."""
    try:
        address = frame.get("Peer-Address")
    except Exception:  # noqa: BLE001 - not a TCP peer (inproc): its connection
        return ident
    if address.startswith("localhost:"):  # a local socket (host:uid:gid:pid): its uid
        return frame.get("User-Id")
    return address


def principal_of(curve: bool):
    """``f(frame, ident)``: the principal of a request (``frame``: a zmq.Frame of it,
    ``ident``: its connection)."""
    return curve_principal if curve else address_principal


class Held:
    """Places held per principal, at most ``per`` each."""

    __slots__ = ("per", "counts")

    def __init__(self, per: int):
        self.per = per
        self.counts: dict = {}

    def full(self, principal) -> bool:
        return self.counts.get(principal, 0) >= self.per

    def take(self, principal) -> None:
        self.counts[principal] = self.counts.get(principal, 0) + 1

    def give(self, principal) -> None:
        n = self.counts[principal] - 1
        if n:
            self.counts[principal] = n
        else:
            del self.counts[principal]


class PendingAdds(collections.deque):
    """The add worker's answers waiting for the journal, counted per principal.

    ``admit`` each client request before it is handled: past its principal's share it raises
    TOO_MANY_REQUESTS (and for what a connection shut for flooding had queued, which the
    refusal budget then leaves unanswered); otherwise the next answer ``append``ed with a
    client reply is counted to that principal until ``popleft`` takes it off (answers for the
    read worker count to nobody).  Only ``append``, ``popleft`` and ``clear`` keep the counts.
    The principal is read off every request, not remembered per connection identity: a client
    may choose its ROUTER identity (ZMQ_ROUTING_ID), including one a gone connection of another
    had.
    """

    def __init__(self, max_pending: int, principal, refusals=None):
        super().__init__()
        self.refusals = refusals  # workers/common.py RefusalBudget of the socket
        self.held = Held(share(max_pending))
        self.principal = principal  # principal(frame, ident)
        self.owners: collections.deque = collections.deque()
        self.current = None  # the principal of the request being handled

    def admit(self, frame, ident, op: int) -> None:
        self.current = None
        if self.refusals is not None and self.refusals.dropping(ident):
            raise wire.ProtocolError("connection shut for flooding", Status.TOO_MANY_REQUESTS)
        if op not in _COUNTED_OPS:
            return
        p = self.principal(frame, ident)
        if self.held.full(p):
            raise wire.ProtocolError("this client's share of the pending adds is taken",
                                     Status.TOO_MANY_REQUESTS)
        self.current = p

    def append(self, pending) -> None:
        owner = self.current if pending.reply[0] is not None else None
        self.current = None
        super().append(pending)
        self.owners.append(owner)
        if owner is not None:
            self.held.take(owner)

    def popleft(self):
        pending = super().popleft()
        owner = self.owners.popleft()
        if owner is not None:
            self.held.give(owner)
        return pending

    def clear(self) -> None:
        super().clear()
        self.owners.clear()
        self.held.counts.clear()


_COUNTED_OPS = frozenset((int(wire.Op.ADD), int(wire.Op.WRITE_LAC), int(wire.Op.FORCE_LEDGER)))  # the ops that wait for the journal
