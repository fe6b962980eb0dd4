"""What the bookie's HTTP servers (admin API, /metrics) refuse before a route runs: the rules,
with no sockets (admin/server.py drives them).

Theory of operation.  A server serves each connection on a thread of its own, at most
``max_total`` at a time.  A slow client (slowloris: a header byte every few seconds) must not
be able to keep those places, or a liveness probe's ``GET /heartbeat`` and Prometheus's scrape
go unanswered and a healthy bookie is restarted.  Three rules, each enough for one attack:

- **A deadline for the whole request.**  From the moment a connection starts waiting for a
  request, its request line, headers and body must all have arrived within ``request_timeout_s``
  (``RequestDeadline``); past it the connection is closed, however steadily it trickles.  The
  idle timeout (``httpServerIdleTimeoutMs``) still bounds each single read.
- **A cap per peer address** (``max_per_peer``): one address holds at most that many of the
  places, so one remote host cannot take them all.
- **Eviction of who is still talking.**  A connection that would pass a cap takes the place of
  the connection (of the same address, for the per-address cap; of anyone, for the total) that
  has waited longest for a request it has not finished sending; only when every place is
  serving a complete request is the newcomer refused (503).  A request sent whole, as probes
  and scrapers send theirs, is read in microseconds and served; the trickling connections are
  the oldest waiting ones, so they are the ones that go.  Loopback clients all share 127.0.0.1
  (or pick other 127/8 addresses), so the per-address cap alone would let a local attacker
  shut the local probe out; eviction is what keeps it served.

``host_refusal`` is the DNS-rebinding check of an API that takes no token: a browser on the
host, sent to a page whose name resolves to 127.0.0.1, would otherwise reach the API with its
own ``Host:``.  Only the names the bookie answers to are accepted.
"""

from __future__ import annotations

import dataclasses
import threading

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


# ---- Host -----------------------------------------------------------------------------------------

def host_name(header: str) -> str:
    """The name of a ``Host:`` value, lower case, without port or IPv6 brackets.  A bracketed
    value followed by anything but ``:PORT`` is returned whole (no name matches it)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1:] if end > 0 else ""
        if end > 0 and (not rest or (rest[0] == ":" and rest[1:].isdigit())):
            return value[1:end]
        return value
    name, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name
    return value


def allowed_host_names(*configured: str, extra: list[str] | tuple[str, ...] = ()) -> frozenset[str] | None:
    """The names an unauthenticated API accepts: loopback's, the given addresses and host names
    (an empty one or a wildcard address skipped), and ``extra`` (httpServerAllowedHosts).
    None (any name) when ``extra`` holds ``*``."""
    if "*" in extra:
        return None
    names = set(LOOPBACK_NAMES)
    for n in (*configured, *extra):
        n = host_name(n) if n else ""
        if n and n not in ("0.0.0.0", "::"):
            names.add(n)
    return frozenset(names)


def host_refusal(headers: list[str], allowed: frozenset[str] | None) -> str | None:
    """Why a request's ``Host`` headers are refused (one line), or None.  No header at all is
    accepted (no browser sends a request without one); more than one, or another name, is not."""
    if allowed is None or not headers:
        return None
    if len(headers) > 1:
        return "more than one Host header"
    name = host_name(headers[0])
    if name in allowed:
        return None
    return (f"Host {headers[0].strip()[:100]!r} is not a name of this bookie: add it to "
            f"httpServerAllowedHosts, or send the bearer token of httpServerAuthTokenFile")


# ---- the request deadline ----------------------------------------------------------------------------

class RequestDeadline:
    """How long the next read of a connection may block: the idle timeout, but never past the
    request's deadline.  ``start(now)`` when the connection begins waiting for a request;
    ``done()`` once the request is read whole (the response is then written with the idle
    timeout alone)."""

    def __init__(self, request_timeout_s: float, idle_timeout_s: float):
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.deadline: float | None = None

    def start(self, now: float) -> None:
        self.deadline = now + self.request_timeout_s

    def done(self) -> None:
        self.deadline = None

    def read_timeout_s(self, now: float) -> float:
        """Seconds the next read may wait; raises TimeoutError once the deadline has passed."""
        if self.deadline is None:
            return self.idle_timeout_s
        left = self.deadline - now
        if left <= 0:
            raise TimeoutError("request not received whole within httpServerRequestTimeoutMs")
        return min(self.idle_timeout_s, left)


# ---- places ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Place:
    peer: str
    waiting_since: float | None  # None: serving a request read whole


@dataclasses.dataclass(frozen=True)
class Admission:
    admitted: bool
    evict: tuple = ()  # the keys of connections to shut down to make room


class ConnectionPlaces:
    """Who holds the server's places; thread-safe (the accept loop admits, the connections'
    threads report).  See the module docstring for the rules."""

    def __init__(self, max_total: int, max_per_peer: int):
        self.max_total = max_total
        self.max_per_peer = max_per_peer
        self._places: dict[object, _Place] = {}
        self._lock = threading.Lock()
        self.evicted_total = 0
        self.refused_total = 0

    def admit(self, key, peer: str, now: float) -> Admission:
        """Give ``key`` (a new connection of ``peer``) a place, waiting for its request, after
        evicting what the caps require; or refuse it."""
        with self._lock:
            evict = []
            mine = [k for k, p in self._places.items() if p.peer == peer]
            if len(mine) >= self.max_per_peer:
                victim = self._oldest_waiting(mine)
                if victim is None:
                    self.refused_total += 1
                    return Admission(False)
                evict.append(victim)
            if len(self._places) - len(evict) >= self.max_total:
                victim = self._oldest_waiting([k for k in self._places if k not in evict])
                if victim is None:
                    self.refused_total += 1
                    return Admission(False)
                evict.append(victim)
            for k in evict:
                del self._places[k]
            self.evicted_total += len(evict)
            self._places[key] = _Place(peer, now)
            return Admission(True, tuple(evict))

    def _oldest_waiting(self, keys) -> object | None:
        waiting = [(self._places[k].waiting_since, i, k) for i, k in enumerate(keys)
                   if self._places[k].waiting_since is not None]
        return min(waiting)[2] if waiting else None

    def serving(self, key) -> None:
        """``key``'s request is read whole: its place is no longer taken from it."""
        with self._lock:
            place = self._places.get(key)
            if place is not None:
                place.waiting_since = None

    def waiting(self, key, now: float) -> None:
        """``key`` waits for its next request (keep-alive): evictable again, as of ``now``."""
        with self._lock:
            place = self._places.get(key)
            if place is not None:
                place.waiting_since = now

    def holds(self, key) -> bool:
        with self._lock:
            return key in self._places

    def release(self, key) -> None:
        with self._lock:
            self._places.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._places)
