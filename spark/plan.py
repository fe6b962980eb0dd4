"""Planning reads: which entries of which ledgers a query (or a micro-batch) reads.

Theory of operation
-------------------
A *source* is one ledger (``ledgers`` option) or one log (``log`` / ``logPattern``).  Its
position is a JSON value (see ``bookie.spark.options``):

* a ledger's position is the next entry to read;
* a log's position is ``[ledger_id, next_entry]`` in one ledger of its list (``[-1, 0]``: before
  the first ledger).  It moves on to the next ledger of the list only once its ledger is closed
  and read to its last entry.

``available`` walks each source from a start position to what can be read now, without ever
fencing: a closed ledger up to its last entry, an open one up to the last-add-confirmed read
from its bookies now, and a log - following ``read_log`` - through its closed ledgers and into
the first ledger that is not closed, never past it.  The result is a list of ``Span`` (ledger,
first, last; inclusive) per source and the position after them.  ``admit`` cuts spans to a
budget of entries.  ``spans_between`` rebuilds the spans from a start and an end position alone
(a stream's ``partitions(start, end)``, possibly in another process and after a restart): the
ledgers a log position passed were closed, so their ends are fixed and a retried task reads
exactly the same entries.

Positions never move backwards: an end below the start (Spark hands those out after restarts)
reads nothing and keeps the start.

Data loss (a ledger deleted, a log position whose ledger left the list) raises
``DataLossError`` naming it, or - with ``failOnDataLoss=false`` - is logged and skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from bookie.client import NoSuchLedgerError, NoSuchLogError
from bookie.spark.options import EARLIEST, LATEST, ReadOptions

log = logging.getLogger("bookie.spark")

BEFORE_FIRST = [-1, 0]


class DataLossError(RuntimeError):
    """Data the query should read is gone; the message names the ledger, entry or log."""


@dataclasses.dataclass(frozen=True)
class Span:
    """Entries ``first``..``last`` (inclusive) of a ledger, of log ``log`` (None: a plain
    ledger)."""
    log: str | None
    ledger_id: int
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def data_loss(ro: ReadOptions, message: str) -> None:
    """Raise DataLossError, or log the loss when failOnDataLoss is false."""
    if ro.fail_on_data_loss:
        raise DataLossError(message + " (set failOnDataLoss=false to skip lost data)")
    log.warning("skipping lost data: %s", message)


def _lac(bk, ro: ReadOptions, ledger_id: int) -> tuple[int, bool] | None:
    """(last readable entry, closed) of a ledger now, never fencing; None if it is gone."""
    try:
        rh = bk.open_ledger(ledger_id, digest=ro.conn.digest, password=ro.conn.password,
                            recovery=False)
    except NoSuchLedgerError:
        return None
    return rh.last_add_confirmed, rh.is_closed


# -- sources -----------------------------------------------------------------------------------

def log_names(bk, ro: ReadOptions) -> list[str]:
    """The logs the query reads now (``logPattern`` is matched whole, again at every call)."""
    if ro.logs is not None:
        return list(ro.logs)
    pattern = re.compile(ro.log_pattern)
    return [n for n in bk.list_logs() if pattern.fullmatch(n)]


def _log_list(bk, ro: ReadOptions, name: str) -> list[int] | None:
    try:
        return bk.log_ledgers(name)[0]
    except NoSuchLogError:
        return None


# -- start positions ---------------------------------------------------------------------------

def start_positions(bk, ro: ReadOptions, spec) -> dict:
    """Resolve ``startingOffsets`` (earliest / latest / JSON) into positions of every source
    read now.  Sources the JSON does not name start at the earliest entry."""
    out = {"ledgers": {}, "logs": {}}
    given = spec if isinstance(spec, dict) else {"ledgers": {}, "logs": {}}
    default = "latest" if spec == "latest" else "earliest"
    for lid in ro.ledgers or ():
        value = given["ledgers"].get(str(lid), LATEST if default == "latest" else EARLIEST)
        if value == EARLIEST:
            value = 0
        elif value == LATEST:
            found = _lac(bk, ro, lid)
            value = found[0] + 1 if found else 0
        out["ledgers"][str(lid)] = value
    if ro.ledgers is None:
        for name in log_names(bk, ro):
            value = given["logs"].get(name, default)
            if value == "earliest":
                value = list(BEFORE_FIRST)
            elif value == "latest":
                value = _log_walk(bk, ro, name, list(BEFORE_FIRST), None)[1]
            out["logs"][name] = list(value)
    return out


# -- what can be read now ----------------------------------------------------------------------

def available(bk, ro: ReadOptions, start: dict, ending=None) -> dict:
    """For every source: ``(spans, end_position)`` readable from ``start`` now.

    ``ending`` (batch ``endingOffsets`` JSON) caps a ledger's end (exclusive entry id) or a
    log's end position.  Sources missing from ``start`` (a log that matched ``logPattern``
    since) start at the earliest entry.
    """
    out = {}
    ending = ending if isinstance(ending, dict) else {"ledgers": {}, "logs": {}}
    for lid in ro.ledgers or ():
        key = str(lid)
        first = start["ledgers"].get(key, 0)
        found = _lac(bk, ro, lid)
        if found is None:
            data_loss(ro, f"ledger {lid} was deleted (the query had read it up to entry "
                          f"{first - 1})")
            out[("ledger", key)] = ([], first)
            continue
        last = found[0]
        cap = ending["ledgers"].get(key)
        if cap is not None and cap >= 0:
            last = min(last, cap - 1)
        spans = [Span(None, lid, first, last)] if last >= first else []
        out[("ledger", key)] = (spans, max(first, last + 1))
    if ro.ledgers is None:
        for name in log_names(bk, ro):
            pos = list(start["logs"].get(name, BEFORE_FIRST))
            cap = ending["logs"].get(name)
            out[("log", name)] = _log_walk(bk, ro, name, pos, cap if isinstance(cap, list)
                                           else None)
    return out


def _log_walk(bk, ro: ReadOptions, name: str, pos: list, cap: list | None):
    """(spans, end position) of log ``name`` from ``pos``, following read_log's rule."""
    ledgers = _log_list(bk, ro, name)
    if ledgers is None:
        data_loss(ro, f"log {name} was deleted")
        return [], pos
    if pos[0] == -1:
        index, entry = 0, 0
    elif pos[0] in ledgers:
        index, entry = ledgers.index(pos[0]), pos[1]
    else:
        later = [i for i, lid in enumerate(ledgers) if lid > pos[0]]
        data_loss(ro, f"log {name}: position {pos} names ledger {pos[0]}, which left the "
                      f"log's list {ledgers}")
        if not later:
            return [], pos
        index, entry = later[0], 0
    spans = []
    while index < len(ledgers):
        lid = ledgers[index]
        found = _lac(bk, ro, lid)
        if found is None:
            data_loss(ro, f"log {name}: ledger {lid} of its list was deleted")
            if index + 1 < len(ledgers):
                index, entry = index + 1, 0
                continue
            return spans, [lid, entry]
        last, closed = found
        if cap is not None and cap[0] == lid:
            last, closed = min(last, cap[1] - 1), False  # stop here
        if last >= entry:
            spans.append(Span(name, lid, entry, last))
        end = [lid, max(entry, last + 1)]
        if not closed or index + 1 == len(ledgers):
            return spans, end
        index, entry = index + 1, 0
    return spans, [-1, 0]


def admit(found: dict, max_entries: int | None) -> dict:
    """Cut ``available``'s result to at most ``max_entries`` entries in all, shared between
    the sources in proportion to their backlog (each with data gets at least one)."""
    if max_entries is None:
        return found
    backlog = {key: sum(s.count for s in spans) for key, (spans, _) in found.items()}
    total = sum(backlog.values())
    if total <= max_entries:
        return found
    budget = {key: (n * max_entries) // total for key, n in backlog.items()}
    spare = max_entries - sum(budget.values())
    for key in sorted(backlog, key=lambda k: -backlog[k]):
        if spare <= 0:
            break
        if backlog[key] > budget[key]:
            budget[key] += 1
            spare -= 1
    out = {}
    for key, (spans, end) in found.items():
        if budget[key] >= backlog[key]:
            out[key] = (spans, end)
            continue
        kept, left = [], budget[key]
        for span in spans:
            if left <= 0:
                break
            take = min(left, span.count)
            kept.append(dataclasses.replace(span, last=span.first + take - 1))
            left -= take
        if not kept:
            out[key] = ([], _start_of(key, spans))
            continue
        tail = kept[-1]
        out[key] = (kept, tail.last + 1 if key[0] == "ledger" else [tail.ledger_id,
                                                                      tail.last + 1])
    return out


def _start_of(key, spans):
    first = spans[0]
    return first.first if key[0] == "ledger" else [first.ledger_id, first.first]


def offsets_of(found: dict, start: dict) -> dict:
    """The offsets JSON after ``found``'s spans (sources not in ``found`` keep ``start``)."""
    out = {"ledgers": dict(start.get("ledgers", {})), "logs": dict(start.get("logs", {}))}
    for (kind, key), (_, end) in found.items():
        out["ledgers" if kind == "ledger" else "logs"][key] = end
    return out


# -- rebuilding a micro-batch's spans ----------------------------------------------------------

def spans_between(bk, ro: ReadOptions, start: dict, end: dict) -> list[Span]:
    """The spans from ``start`` to ``end`` (two offsets of the stream), from the positions
    alone.  An end below its start reads nothing (clamped)."""
    spans = []
    for key, stop in end.get("ledgers", {}).items():
        first = start.get("ledgers", {}).get(key, 0)
        if stop > first:
            spans.append(Span(None, int(key), first, stop - 1))
    for name, stop in end.get("logs", {}).items():
        spans += _log_spans(bk, ro, name, list(start.get("logs", {}).get(name, BEFORE_FIRST)),
                            list(stop))
    return spans


def _log_spans(bk, ro: ReadOptions, name: str, pos: list, stop: list) -> list[Span]:
    if stop[0] == -1:
        return []
    ledgers = _log_list(bk, ro, name)
    if ledgers is None or stop[0] not in ledgers:
        data_loss(ro, f"log {name}: ledger {stop[0]} of the batch's end left the log's list")
        return []
    last_index = ledgers.index(stop[0])
    if pos[0] == -1:
        index, entry = 0, 0
    elif pos[0] in ledgers:
        index, entry = ledgers.index(pos[0]), pos[1]
    else:
        data_loss(ro, f"log {name}: ledger {pos[0]} of the batch's start left the log's list")
        index = next((i for i, lid in enumerate(ledgers) if lid > pos[0]), len(ledgers))
        entry = 0
    if index > last_index:
        return []  # an end below the start: clamped, nothing to read
    spans = []
    for i in range(index, last_index + 1):
        lid = ledgers[i]
        first = entry if i == index else 0
        if i == last_index:
            last = stop[1] - 1
        else:
            try:
                meta = bk.ledger_metadata(lid)  # passed by the walk: closed, its end fixed
            except NoSuchLedgerError:
                data_loss(ro, f"log {name}: ledger {lid} of its list was deleted")
                continue
            last = meta.last_entry_id
        if last >= first:
            spans.append(Span(name, lid, first, last))
    return spans


def split(spans: list[Span], max_entries: int, min_partitions: int) -> list[Span]:
    """Cut spans into partitions of at most ``max_entries`` entries, then keep halving the
    largest until there are ``min_partitions`` (or every one holds a single entry)."""
    parts = []
    for span in spans:
        first = span.first
        while first <= span.last:
            last = min(span.last, first + max_entries - 1)
            parts.append(dataclasses.replace(span, first=first, last=last))
            first = last + 1
    while len(parts) < min_partitions:
        big = max(range(len(parts)), key=lambda i: parts[i].count, default=None)
        if big is None or parts[big].count < 2:
            break
        span = parts[big]
        middle = span.first + span.count // 2 - 1
        parts[big:big + 1] = [dataclasses.replace(span, last=middle),
                              dataclasses.replace(span, first=middle + 1)]
    return parts
