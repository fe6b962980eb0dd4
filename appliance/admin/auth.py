"""Bearer-token authentication of the HTTP admin API (``httpServerAuthTokenFile``).

``BearerAuth.refusal(headers)`` says why a request is refused (None: admitted).  The token is
compared in constant time: both the token sent and the configured one are hashed (SHA-256) and
the digests compared with ``hmac.compare_digest``, so neither the token's contents nor its
length show in the time an answer takes.  Every refusal is counted (``refused_total``, the
metric ``bookie_admin_http_unauthorized_total``); the log gets one line for the first and then
at most one per ``LOG_INTERVAL_S``, saying how many were refused since the line before, so a
flood of bad requests cannot flood the log.

The token file itself is read and checked at start-up (appliance/startchecks.py).

Without a token (loopback only, or ``httpServerAllowUnauthenticated=true``) the API serves
``tokenless_refusal``'s share and nothing more: every GET that only reads, except those that
hand out entries or write (``TOKEN_ONLY_READS``), and exactly the two writes of
``TOKENLESS_WRITES``; everything else is 403 with a line naming ``httpServerAuthTokenFile``.
A GET route added later is served without a token unless listed here; a route of any other
method is refused until it is listed in ``TOKENLESS_WRITES`` (the start warning names those).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time

LOG_INTERVAL_S = 10.0
REALM = "bookie-admin"
PUBLIC = frozenset({("GET", "/heartbeat")})  # served to anyone: liveness probes carry no token
TOKEN_KEY = "httpServerAuthTokenFile"

# Without a token: the only changes served (the start-up warning names exactly these) ...
TOKENLESS_WRITES = frozenset({("PUT", "/api/v1/bookie/state/readonly"), ("PUT", "/api/v1/bookie/gc")})
# ... and the GETs refused: entries handed out, and sanity (BookKeeper's GET that writes a ledger)
TOKEN_ONLY_READS = frozenset({("GET", "/api/v1/ledger/read"), ("GET", "/api/v1/bookie/sanity")})
READ_METHODS = frozenset({"GET", "HEAD"})


def tokenless_refusal(method: str, path: str) -> str | None:
    """Why an API without a token refuses a route (one line for a 403), or None: served."""
    if (method, path) in TOKENLESS_WRITES:
        return None
    if method in READ_METHODS and (method, path) not in TOKEN_ONLY_READS:
        return None
    what = "hands out entries or writes" if method in READ_METHODS else "changes state"
    return (f"{method} {path[:200]} {what}: served only with a bearer token; set "
            f"{TOKEN_KEY} (`bookie shell gentoken FILE` makes one)")


class Refusal:
    """Why a request is refused: the one-line error, the ``WWW-Authenticate`` value, and a
    short reason for the log."""

    def __init__(self, reason: str, message: str, challenge: str):
        self.reason = reason
        self.message = message
        self.challenge = challenge


MISSING = Refusal("missing", "authentication required: send Authorization: Bearer <token> "
                             "(the token of httpServerAuthTokenFile)", f'Bearer realm="{REALM}"')
MALFORMED = Refusal("malformed", "Authorization: expected one header 'Bearer <token>'",
                    f'Bearer realm="{REALM}", error="invalid_request"')
WRONG = Refusal("wrong_token", "wrong bearer token", f'Bearer realm="{REALM}", error="invalid_token"')


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class BearerAuth:
    def __init__(self, token: bytes, log, log_interval_s: float = LOG_INTERVAL_S,
                 clock=time.monotonic):
        self._digest = _digest(token)
        self._log = log
        self._interval = log_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next_line_at = 0.0
        self._unlogged = 0
        self.refused_total = 0

    def refusal(self, method: str, path: str, authorization: list[str]) -> Refusal | None:
        """None if the request may be served: a public route, or exactly one ``Authorization``
        header ``Bearer <token>`` (scheme in any case) with the configured token."""
        if (method, path) in PUBLIC:
            return None
        if not authorization:
            return MISSING
        if len(authorization) > 1:
            return MALFORMED
        scheme, _, given = authorization[0].strip().partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return MALFORMED
        try:
            sent = given.encode("latin-1")  # http.server decoded the header as ISO-8859-1
        except UnicodeEncodeError:
            return WRONG
        return None if hmac.compare_digest(_digest(sent), self._digest) else WRONG

    def refused(self, peer: str, method: str, path: str, refusal: Refusal) -> None:
        """Count a refusal and log it, unless a line was written less than the interval ago."""
        with self._lock:
            self.refused_total += 1
            self._unlogged += 1
            now = self._clock()
            if now < self._next_line_at:
                return
            self._next_line_at = now + self._interval
            count, self._unlogged = self._unlogged, 0
        self._log("admin request refused: not authenticated", level="warning", peer=peer,
                  method=method, path=path[:200], reason=refusal.reason,
                  refused_since_last_line=count)
