"""Which bookies are gone for good, read from their cookies in the metadata store: the one
place the auditor and the replication workers ask (the rule is ``bookie.core.naming``)."""

from __future__ import annotations

import orjson

from bookie.core import naming
from bookie.metadata import CookieNotFoundError


def gone_for_good(store, bookies, force: bool = False, log=None) -> set[str]:
    """Those of ``bookies`` whose data is gone for good (``core.naming.gone_for_good``): no
    cookie in the store, or ``force`` (an operator's recover or decommission); never one whose
    cookie is a rename record (``updatecookie`` gave its disks a new id)."""
    gone = set()
    for bookie in bookies:
        try:
            raw, _ = store.read_cookie(bookie)
        except CookieNotFoundError:
            stored, in_store = None, False
        else:
            in_store = True
            try:
                stored = orjson.loads(raw)
            except ValueError:
                stored = None
        new_id = naming.renamed_to(stored)
        if naming.gone_for_good(in_store, operator_forced=force, renamed=new_id is not None):
            gone.add(bookie)
        elif new_id is not None and log is not None:
            log("bookie renamed: its ledgers wait for updateledgers", level="warning",
                bookie=bookie, renamed_to=new_id)
    return gone
