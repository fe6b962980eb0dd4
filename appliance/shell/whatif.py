"""``bookie shell whatif BOOKIE... [--rack R] [--strict]``: is it safe to stop these bookies (or
every bookie of that rack) now?  The rule is core/safe_to_stop.py's; this module reads what it
needs (every ledger's metadata, the live registrations, the bookies' locations) and says which
ledgers would fall below their ack quorum, become unreadable, lose their last live copy, or
leave their writer stuck.

By default the question is a rolling restart's: ledgers only falling below their ack quorum
(every entry keeps a live copy, every writer goes on) are a warning naming them, exit 0;
``--strict`` makes them unsafe too.  Exit status: 0 safe, 1 not safe, 2 a wrong question (no
bookie and no rack, a malformed id, an id or rack the cluster does not know: appliance/shell/
known.py, no metadata store).  ``GET /api/v1/bookie/safe_to_stop`` (admin/safety.py) and
``decommissionbookie``'s warning use ``stop_verdict`` below.  With ``--conf`` and no bookie
named, the question is about the bookie that configuration runs (the package's prerm asks it
before an upgrade or removal stops the bookie).
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from bookie.appliance.errors import CliError
from bookie.appliance.shell.known import UnknownError, require_bookies, require_rack
from bookie.appliance.shell.registry import print_json, with_store
from bookie.core.safe_to_stop import check_stop
from bookie.workers.config import BookieConfig, ConfigError
from bookie.metadata import NoSuchNodeError
from bookie.metadata.bookie_ids import bookie_id_problem
from bookie.metadata.ledger import LedgerState

WHAT = {"last_copy": "would lose their last live copy",
        "unreadable": "would become unreadable",
        "stalled": "would leave their writer stuck (no writable bookie to replace it)",
        "below_ack_quorum": "would fall below their ack quorum"}
SHOWN = 20  # ledger ids shown per line; --json has them all


class StopQuestionError(ValueError):
    """The question itself is wrong (no bookie, a malformed id): a usage error."""


def register(commands, metadata_command: Callable) -> None:
    p = metadata_command("whatif", "Say whether stopping these bookies (or a rack) now is safe: "
                         "which ledgers would fall below their ack quorum, become unreadable "
                         "or lose their last live copy. Exit 0 safe (ledgers only below their ack "
                         "quorum are a warning), 1 not safe, 2 a wrong question.", _whatif)
    p.add_argument("bookies", metavar="BOOKIE", nargs="*",
                   help="bookie id (host:port or bookieId); none, with --conf: that bookie")
    p.add_argument("--rack", "-rack", metavar="R", default=None,
                   help="every bookie whose location is R or under it (/REGION/RACK)")
    p.add_argument("--strict", action="store_true",
                   help="a ledger falling below its ack quorum (reduced redundancy, every entry "
                        "still readable) makes the stop unsafe too")


def _in_rack(location: str | None, rack: str) -> bool:
    rack = "/" + rack.strip("/")
    return bool(location) and (location == rack or location.startswith(rack + "/"))


def stop_verdict(store, bookies: list[str], rack: str | None = None,
                 deadline_s: float | None = None, strict: bool = False) -> dict:
    """The verdict (core/safe_to_stop.py's ``as_dict``) for stopping ``bookies`` and the
    bookies of ``rack``, plus ``down`` (bookies in ensembles that are not registered now) and
    ``complete`` (False when ``deadline_s`` ran out before every ledger was read).

    Raises:
        StopQuestionError: no bookie and no rack, or a malformed bookie id.
        UnknownError: a bookie id or a rack the cluster does not know (known.py).
    """
    from bookie.client.metadata import ClientStore  # lazy: numpy

    if not bookies and not rack:
        raise StopQuestionError("name at least one bookie, or --rack R")
    for b in bookies:
        problem = bookie_id_problem(b)
        if problem:
            raise StopQuestionError(f"{b!r} is not a bookie id: it {problem}")
    writable = set(store.list_bookies())
    live = writable | set(store.list_bookies(readonly=True))
    ledgers, named, complete = [], set(), True
    until = None if deadline_s is None else time.monotonic() + deadline_s
    for ledger_id in store.list_ledgers():
        if until is not None and time.monotonic() > until:
            complete = False
            break
        try:
            meta, _ = store.read_ledger(ledger_id)
        except NoSuchNodeError:
            continue  # deleted meanwhile
        ledgers.append((ledger_id, meta, meta.state == LedgerState.CLOSED))
        for _, ensemble in meta.fragments:
            named.update(ensemble)
    if complete:  # a partial read cannot tell an unknown id from an unread one
        require_bookies(store, bookies, named)
    stopping = set(bookies)
    if rack:
        locations = ClientStore(store, own=False).locations(sorted(live | named))
        in_rack = {b for b, loc in locations.items() if _in_rack(loc, rack)}
        require_rack(rack, in_rack)
        stopping |= in_rack
    verdict = check_stop(ledgers, live, stopping, writable, strict=strict).as_dict()
    verdict["rack"] = rack
    verdict["down"] = sorted(named - live)
    verdict["complete"] = complete
    verdict["ledgers_checked"] = len(ledgers)
    return verdict


def describe(verdict: dict) -> list[str]:
    """The verdict as lines for people: each ledger once, under the worst that would happen to
    it, at most ``SHOWN`` ids a line."""
    who = ", ".join(verdict["bookies"]) or "no bookie"
    if verdict.get("rack"):
        who += f" (rack {verdict['rack']})"
    checked = f"{verdict['ledgers_checked']} ledgers checked"
    reduced = verdict.get("reduced_redundancy", [])
    if verdict["safe"] and not reduced:
        lines = [f"safe to stop {who}: no ledger would fall below its ack quorum, become "
                 f"unreadable or lose its last live copy ({checked})"]
    elif verdict["safe"]:
        lines = [f"safe to stop {who} for a restart; warning: reduced redundancy until it is "
                 f"back (every entry keeps a live copy, every writer goes on; {checked}; "
                 f"--strict refuses this):"]
    else:
        lines = [f"NOT safe to stop {who}:"]
    listed: set[int] = set()
    for category in WHAT:
        ids = [i for i in verdict[category] if i not in listed]
        listed.update(ids)
        if ids:
            more = f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
            lines.append(f"  {len(ids)} ledger(s) {WHAT[category]}: "
                         f"{', '.join(map(str, ids[:SHOWN]))}{more}")
    if verdict["down"]:
        lines.append(f"  already down (in ensembles, not registered): {', '.join(verdict['down'])}")
    if not verdict["complete"]:
        lines.append(f"  incomplete: only {verdict['ledgers_checked']} ledgers read in time")
    return lines


def _whatif(args) -> int:
    bookies = list(args.bookies)
    if not bookies and not args.rack and args.conf:  # the bookie this configuration runs
        try:
            bookies = [BookieConfig.load(args.conf, check_dirs=False).bookie_id]
        except ConfigError as e:
            raise CliError(f"whatif: {e}") from None

    def body(store) -> int:
        try:
            verdict = stop_verdict(store, bookies, args.rack, strict=args.strict)
        except (StopQuestionError, UnknownError) as e:
            raise CliError(f"whatif: {e}") from None
        if args.json:
            print_json(verdict)
        else:
            print("\n".join(describe(verdict)))
        return 0 if verdict["safe"] else 1
    return with_store(args, body)


def warn_before_stopping(store, bookie: str, deadline_s: float = 10.0) -> None:
    """``decommissionbookie``'s warning: on stderr, when ``bookie`` holds the last live copy of
    anything (or more).  Bounded by ``deadline_s``; never raises (a warning must not fail the
    command it warns for)."""
    try:
        verdict = stop_verdict(store, [bookie], deadline_s=deadline_s, strict=True)
    except Exception as e:  # noqa: BLE001 - the warning is best effort
        print(f"decommissionbookie: could not check whether stopping {bookie} is safe: {e}",
              file=sys.stderr)
        return
    if not verdict["safe"]:
        print("decommissionbookie: warning: " + "\n".join(describe(verdict))
              + f"\n  keep {bookie} running until it is drained (this command reads from it)",
              file=sys.stderr)
