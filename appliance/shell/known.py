"""Whether the bookie ids, racks and ledgers a command names exist (issue 44): the one rule
every ``bookie shell`` verb and admin API route that takes them asks, so a mistyped id is
refused, naming it, instead of answered as if it were a bookie holding nothing.

A bookie id *exists* when the cluster knows it by any of three records: it is registered
(writable or read-only), it has a cookie in the store, or some ledger's metadata names it in an
ensemble.  Only an id none of these knows is refused: a bookie that is down (no registration)
still has its cookie; one renamed by ``updatecookie`` is still named by the ledgers until
``updateledgers --from OLD --to NEW`` runs, and its new id has the cookie.  A rack exists when
some bookie the cluster knows has its location at or under it.  A ledger exists when its
metadata does.

The checks raise ``UnknownError`` (a ``ValueError``): the shell prints it as one line, exit
status 2; the admin API answers 404 with its text.
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

from bookie.appliance.errors import CliError
from bookie.core.naming import named_bookies
from bookie.metadata.errors import NoSuchNodeError
from bookie.metadata.store import COOKIES


class UnknownError(ValueError):
    """A bookie id, rack or ledger that the cluster does not know."""


@contextlib.contextmanager
def refused(verb: str) -> Iterator[None]:
    """A shell verb's checks: ``UnknownError`` becomes its one-line refusal (exit status 2)."""
    try:
        yield
    except UnknownError as e:
        raise CliError(f"{verb}: {e}") from None


def unknown_bookies(store, ids: Iterable[str], named: set[str] | None = None) -> list[str]:
    """The ids of ``ids`` that no registration, cookie or ledger knows, in their order.
    ``named``: the bookies every ledger names, when the caller has read them already."""
    left = [b for b in dict.fromkeys(ids) if b not in store.registered_bookies()]
    if left:
        try:
            cookies = set(store.children(COOKIES))
        except NoSuchNodeError:
            cookies = set()
        left = [b for b in left if b not in cookies]
    if left:
        known = ledger_bookies(store) if named is None else named
        left = [b for b in left if b not in known]
    return left


def ledger_bookies(store) -> set[str]:
    """Every bookie some ledger's metadata names (a ledger deleted meanwhile is skipped)."""
    named: set[str] = set()
    for ledger_id in store.list_ledgers():
        try:
            named |= named_bookies(store.read_ledger(ledger_id)[0].fragments)
        except NoSuchNodeError:
            continue
    return named


def require_bookies(store, ids: Iterable[str], named: set[str] | None = None) -> None:
    """Raise ``UnknownError`` naming every id of ``ids`` the cluster does not know."""
    unknown = unknown_bookies(store, ids, named)
    if unknown:
        which = ", ".join(unknown)
        raise UnknownError(
            f"no bookie {which} in this cluster: not registered, no cookie, in no ledger's "
            f"ensemble (a typo? 'bookie shell listbookies --all' and 'cookie_list' show the "
            f"ids it knows)" if len(unknown) == 1 else
            f"no bookies {which} in this cluster: not registered, no cookie, in no ledger's "
            f"ensemble (typos? 'bookie shell listbookies --all' and 'cookie_list' show the "
            f"ids it knows)")


def require_rack(rack: str, members: Iterable[str]) -> None:
    """Raise ``UnknownError`` when no known bookie is in ``rack`` (``members``: those that are)."""
    if not list(members):
        raise UnknownError(f"no bookie of this cluster is in rack {rack} (a typo? 'bookie shell "
                           f"listbookies --all' shows each bookie's location)")


def require_ledger(store, ledger_id: int) -> None:
    """Raise ``UnknownError`` when no ledger ``ledger_id`` exists."""
    if not store.ledger_exists(ledger_id):
        raise UnknownError(f"no ledger {ledger_id} in this cluster ('bookie shell listledgers' "
                           f"lists them)")
