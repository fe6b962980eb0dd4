"""Bookie ids: what one may be, and when one is an address (BookKeeper's BP-41).

A bookie is known by its *id*: the name it registers under (``/available/{id}``), the name its
cookie records, and the name ledger ensembles carry.  Two kinds of id exist:

* an **address id** ``host:port`` (no ``bookieId`` configured, as before BP-41): the id *is*
  where the bookie listens (its add port; reads on port + 1).  Such an id is never looked up:
  it resolves to itself.
* a **named id** (``bookieId=bk-1``): stable while the bookie's host or port changes.  Where it
  listens now is read from its registration (the ``host`` and ``add_port`` it publishes);
  ``bookie.client.resolver`` does that, once, for every consumer of ensembles.

Rules (BookKeeper's ``BookieId``: "a non-empty string of ASCII letters and digits, ``:``,
``-`` and ``.``"; its pattern also admits ``_``; ``readonly`` is reserved because
``/available/readonly`` holds the read-only bookies).  This product adds: at most
``MAX_ID_CHARS`` characters, and not ``.`` or ``..`` (they are node-path steps).  A named id
must not *look like* an address (``host:port``, a port after the last colon): a reader could
not tell it from one, so an id of that shape must be the bookie's own address
(``address_id_problem``).
"""

from __future__ import annotations

import re

MAX_ID_CHARS = 255
ID_PATTERN = re.compile(r"[A-Za-z0-9:._-]+")
RESERVED = ("readonly", ".", "..")


def split_address(bookie_id: str) -> tuple[str, int] | None:
    """``(host, port)`` if ``bookie_id`` has the shape ``host:port`` (port 1..65534, as the
    read port is port + 1), else None."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65535:
        return None
    return host, int(port)


def is_address(bookie_id: str) -> bool:
    """True for an address id ``host:port`` (it resolves to itself, never looked up)."""
    return split_address(bookie_id) is not None


def bookie_id_problem(bookie_id) -> str | None:
    """Why ``bookie_id`` cannot be a bookie id (one phrase), or None when it can."""
    if not isinstance(bookie_id, str) or not bookie_id:
        return "must not be empty"
    if len(bookie_id) > MAX_ID_CHARS:
        return f"is longer than {MAX_ID_CHARS} characters"
    if not ID_PATTERN.fullmatch(bookie_id):
        return "may hold only ASCII letters, digits, ':', '-', '_' and '.'"
    if bookie_id in RESERVED:
        return f"{bookie_id!r} is reserved"
    return None


def address_id_problem(bookie_id: str, own_address: str) -> str | None:
    """A configured ``bookieId`` shaped like an address must be the bookie's own address
    ``own_address`` (``host:port``): otherwise clients would take it for another bookie's
    address.  Returns why not, or None."""
    if is_address(bookie_id) and bookie_id != own_address:
        return (f"looks like the address of another bookie (host:port) while this bookie "
                f"listens on {own_address}: a named id must not end in ':PORT'")
    return None
