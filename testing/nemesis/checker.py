"""The checker: a round's history and what recovery found, in; violations and counts, out.

Pure logic (no I/O): ``check_round(events, ledgers, logs)`` takes the merged history
(``history.load_history``) and the final state the runner read after healing every fault and
recovering every ledger (``FinalLedger``, ``FinalLog``), and returns a ``RoundReport``.

The rules, each a violation ``kind`` when broken:

==========================  ===================================================================
``lost``                    an acknowledged entry (or log append) does not read back byte for
                            byte at its entry id after recovery
``closed_below_ack``        a recovered ledger closed below its highest acknowledged entry
``unrecoverable``           a ledger with acknowledged entries could not be recovered once
                            every fault was healed
``duplicate_ack``           two adds were acknowledged with the same entry id
``ack_after_fence``         an add invoked after the ledger was recovered (or after its writer
                            saw ``LedgerFencedError``) was acknowledged
``recoveries_disagree``     two recoveries of one ledger closed it at different entries
``unwritten_bytes``         a ledger, log or read holds bytes no client wrote there
``hole``                    a recovered ledger lacks an entry below its last entry
``reordered``               one writer's adds or appends appear out of invocation order, or twice
``read_past_lac``           a non-recovery read returned an entry past the handle's LAC
``read_not_in_ledger``      a non-recovery read returned an entry recovery did not keep
``read_differs``            a non-recovery read returned other bytes than the recovered ledger
``lac_backwards``           one handle's LAC went down
``lac_beyond_close``        a handle saw a LAC above where recovery closed the ledger
``gap``                     a log skips an entry id or an append of a writer whose later append
                            it holds
``interleaved_writers``     a log holds appends of an earlier writer after a later one's
``log_read_not_prefix``     a ``read_log`` returned what is not a prefix of the final log
``read_unacknowledged``     a non-recovery read returned a payload never added to that ledger
``close_below_ack``         a writer's own ``close`` closed below an entry it had acknowledged
``close_not_final``         recovery after the writer's own close found another last entry
``reader_violation``        a reader told LAC = n could not read up to n within its timeout
                            (the client process recorded it; counted apart, as
                            ``reader_violations``)
==========================  ===================================================================

A recovered ledger may legitimately end above its last acknowledged entry (adds that were
sent but never acknowledged, which recovery found on enough bookies): the report names them
(``kept_unacknowledged``) and they must be payloads added to that ledger.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from bookie.testing.nemesis.payload import fingerprint, make_payload, parse_payload


@dataclass
class FinalLedger:
    """A ledger as the checker's recovery found it: closed at ``last_entry`` with ``entries``
    (entry_id -> bytes), or ``error`` (``last_entry`` None) if it could not be recovered."""
    ledger_id: int
    last_entry: int | None
    entries: dict[int, bytes] = field(default_factory=dict)
    error: str | None = None


@dataclass
class FinalLog:
    """A log as ``read_log`` returned it after a takeover closed it: ``records`` in log order
    as (ledger_id, entry_id, bytes), or ``error``."""
    name: str
    records: list[tuple[int, int, bytes]] | None
    error: str | None = None


@dataclass
class Violation:
    kind: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} [{self.where}]: {self.detail}"


@dataclass
class RoundReport:
    """What one round's check found; ``acked == checked + lost + unverified``."""
    acked: int = 0
    checked: int = 0
    lost: int = 0
    unverified: int = 0
    reads_checked: int = 0
    lacs_checked: int = 0
    reader_violations: int = 0
    kept_unacknowledged: list[str] = field(default_factory=list)  # "ledger L entry E: w:s"
    violations: list[Violation] = field(default_factory=list)

    def add(self, kind: str, where: str, detail: str) -> None:
        self.violations.append(Violation(kind, where, detail))


def _ident(writer: str, seq: int) -> str:
    return f"{writer}:{seq}"


def check_round(events: list[dict], ledgers: dict[int, FinalLedger],
                logs: dict[str, FinalLog]) -> RoundReport:
    """Check one round.  ``events`` in time order; ``ledgers`` and ``logs`` the final state of
    every ledger a writer created and every log written in the round."""
    report = RoundReport()
    _check_ledgers(events, ledgers, report)
    _check_logs(events, logs, report)
    return report


# -- ledgers ----------------------------------------------------------------------------------

def _check_ledgers(events: list[dict], ledgers: dict[int, FinalLedger], report: RoundReport) -> None:
    invoked: dict[int, set[tuple[str, int]]] = defaultdict(set)
    acked: dict[int, dict[int, tuple[str, int, float]]] = defaultdict(dict)  # l -> e -> (w, s, t0)
    fenced_at: dict[int, float] = {}   # l -> earliest time the writer was known fenced
    recovered: dict[int, list[int]] = defaultdict(list)
    reads: list[dict] = []
    lacs: dict[tuple, list[dict]] = defaultdict(list)
    closes: dict[int, list[dict]] = defaultdict(list)
    touched: set[int] = set()
    for ev in events:
        kind = ev["ev"]
        if kind == "create":
            touched.add(ev["l"])
        elif kind == "add":
            for i in range(ev["n"]):
                invoked[ev["l"]].add((ev["w"], ev["s"] + i))
        elif kind == "ack":
            touched.add(ev["l"])
            for i in range(ev["n"]):
                entry_id, ident = ev["e"] + i, (ev["w"], ev["s"] + i)
                prior = acked[ev["l"]].get(entry_id)
                if prior is not None and prior[:2] != ident:
                    report.add("duplicate_ack", f"ledger {ev['l']} entry {entry_id}",
                               f"acknowledged for {_ident(*prior[:2])} and {_ident(*ident)}")
                acked[ev["l"]][entry_id] = (*ident, ev["t0"])
        elif kind == "fail" and "Fenced" in ev.get("err", ""):
            fenced_at.setdefault(ev["l"], ev["t"])
        elif kind == "recover":
            recovered[ev["l"]].append(ev["last"])
            fenced_at[ev["l"]] = min(fenced_at.get(ev["l"], ev["t"]), ev["t"])
        elif kind == "read":
            reads.append(ev)
        elif kind == "lac":
            lacs[(ev["p"], ev["h"], ev["l"])].append(ev)
        elif kind == "close":
            closes[ev["l"]].append(ev)
        elif kind == "reader_violation":
            report.reader_violations += 1
            report.add("reader_violation", f"ledger {ev['l']} read by {ev['p']}",
                       f"told LAC {ev['lac']}, entry {ev['e']} unreadable for "
                       f"{ev['t'] - ev['t0']:.1f} s: {ev.get('err')}")

    for ledger_id in sorted(touched | set(acked)):
        _check_ledger(ledger_id, ledgers.get(ledger_id), invoked[ledger_id], acked[ledger_id],
                      fenced_at.get(ledger_id), recovered[ledger_id], report)
        _check_closes(ledger_id, closes[ledger_id], acked[ledger_id], ledgers.get(ledger_id),
                      report)
    for ev in reads:
        _check_read(ev, ledgers.get(ev["l"]), report, invoked[ev["l"]])
    for (process, handle, ledger_id), seen in lacs.items():
        _check_lacs(process, ledger_id, seen, ledgers.get(ledger_id), report)


def _check_ledger(ledger_id: int, final: FinalLedger | None, invoked: set, acked: dict,
                  fenced_at: float | None, recoveries: list[int], report: RoundReport) -> None:
    where = f"ledger {ledger_id}"
    report.acked += len(acked)
    if final is None or final.last_entry is None:
        report.unverified += len(acked)
        if acked:
            report.add("unrecoverable", where, f"{len(acked)} acknowledged entries unverified: "
                       f"{final.error if final else 'never recovered'}")
        return
    last = final.last_entry
    if acked and max(acked) > last:
        report.add("closed_below_ack", where,
                   f"closed at {last} below acknowledged entry {max(acked)}")
    lost = []
    for entry_id, (writer, seq, invoked_at) in sorted(acked.items()):
        if final.entries.get(entry_id) == make_payload(writer, seq):
            report.checked += 1
        else:
            report.lost += 1
            lost.append(entry_id)
        if fenced_at is not None and invoked_at > fenced_at:
            report.add("ack_after_fence", f"{where} entry {entry_id}",
                       f"add invoked {invoked_at - fenced_at:.3f} s after the ledger was fenced "
                       f"was acknowledged")
    if lost:
        report.add("lost", where, f"{len(lost)} acknowledged entries do not read back "
                   f"(first {lost[:8]}; closed at {last})")
    for other in sorted(set(recoveries)):
        if other != last:
            report.add("recoveries_disagree", where, f"a recovery closed it at {other}, "
                       f"the final state is {last}")
    top = max(acked, default=-1)
    for entry_id in range(top + 1, last + 1):
        ident = parse_payload(final.entries.get(entry_id, b""))
        report.kept_unacknowledged.append(
            f"ledger {ledger_id} entry {entry_id}: {_ident(*ident) if ident else 'no payload'}")
    last_seq: dict[str, int] = {}
    for entry_id in range(0, last + 1):
        data = final.entries.get(entry_id)
        if data is None:
            report.add("hole", f"{where} entry {entry_id}", f"missing below last entry {last}")
            continue
        ident = parse_payload(data)
        if ident is None or ident not in invoked:
            report.add("unwritten_bytes", f"{where} entry {entry_id}",
                       f"{len(data)} bytes {bytes(data[:40])!r} were not written to this ledger")
            continue
        writer, seq = ident
        if seq <= last_seq.get(writer, -1):
            report.add("reordered", f"{where} entry {entry_id}",
                       f"holds {_ident(writer, seq)} after {_ident(writer, last_seq[writer])}")
        last_seq[writer] = seq


def _check_closes(ledger_id: int, closes: list[dict], acked: dict, final: FinalLedger | None,
                  report: RoundReport) -> None:
    """The writer's own close: at or above everything it had acknowledged, and what recovery
    finds afterwards."""
    for ev in closes:
        where = f"ledger {ledger_id} closed by {ev['p']}"
        below = [e for e, (_, _, t0) in acked.items() if e > ev["last"] and t0 < ev["t"]]
        if below:
            report.add("close_below_ack", where, f"closed at {ev['last']} below acknowledged "
                       f"entries {sorted(below)[:8]}")
        if final is not None and final.last_entry is not None and final.last_entry != ev["last"]:
            report.add("close_not_final", where, f"the writer closed it at {ev['last']}, "
                       f"recovery found it closed at {final.last_entry}")


def _check_read(ev: dict, final: FinalLedger | None, report: RoundReport,
                invoked: set | None = None) -> None:
    where = f"ledger {ev['l']} entry {ev['e']} read by {ev['p']}"
    report.reads_checked += 1
    if ev.get("id") is None:
        report.add("unwritten_bytes", where, f"the bytes read (fingerprint {ev['d']}) are no "
                   "payload any writer produces")
    elif invoked is not None:
        writer, _, seq = ev["id"].rpartition(":")
        if (writer, int(seq)) not in invoked:
            report.add("read_unacknowledged", where, f"read {ev['id']}, never added to this "
                       "ledger")
    if ev["e"] > ev["lac"]:
        report.add("read_past_lac", where, f"the handle's LAC was {ev['lac']}")
    if final is None or final.last_entry is None:
        return
    if ev["e"] > final.last_entry:
        report.add("read_not_in_ledger", where, f"recovery closed the ledger at {final.last_entry}")
    elif final.entries.get(ev["e"]) is not None and fingerprint(final.entries[ev["e"]]) != ev["d"]:
        report.add("read_differs", where, f"read {ev.get('id')}, recovered "
                   f"{parse_payload(final.entries[ev['e']])}")


def _check_lacs(process: str, ledger_id: int, seen: list[dict], final: FinalLedger | None,
                report: RoundReport) -> None:
    highest = -1
    for ev in seen:
        report.lacs_checked += 1
        if ev["v"] < highest:
            report.add("lac_backwards", f"ledger {ledger_id} handle of {process}",
                       f"LAC went from {highest} to {ev['v']}")
        highest = max(highest, ev["v"])
    if final is not None and final.last_entry is not None and highest > final.last_entry:
        report.add("lac_beyond_close", f"ledger {ledger_id} handle of {process}",
                   f"saw LAC {highest}, recovery closed the ledger at {final.last_entry}")


# -- logs -------------------------------------------------------------------------------------

def _check_logs(events: list[dict], logs: dict[str, FinalLog], report: RoundReport) -> None:
    invoked: dict[str, set[tuple[str, int]]] = defaultdict(set)
    acked: dict[str, list[dict]] = defaultdict(list)
    reads: dict[str, list[dict]] = defaultdict(list)
    for ev in events:
        if ev["ev"] == "append":
            invoked[ev["log"]].add((ev["w"], ev["s"]))
        elif ev["ev"] == "log_ack":
            acked[ev["log"]].append(ev)
        elif ev["ev"] == "log_read":
            reads[ev["log"]].append(ev)
    for name in sorted(set(invoked) | set(acked) | set(logs)):
        _check_log(name, logs.get(name), invoked[name], acked[name], reads[name], report)


def _check_log(name: str, final: FinalLog | None, invoked: set, acked: list[dict],
               reads: list[dict], report: RoundReport) -> None:
    where = f"log {name}"
    report.acked += len(acked)
    if final is None or final.records is None:
        report.unverified += len(acked)
        if acked:
            report.add("unrecoverable", where, f"{len(acked)} acknowledged appends unverified: "
                       f"{final.error if final else 'never read'}")
        return
    at = {(l, e): data for l, e, data in final.records}
    lost = []
    for ev in acked:
        if at.get((ev["l"], ev["e"])) == make_payload(ev["w"], ev["s"]):
            report.checked += 1
        else:
            report.lost += 1
            lost.append(_ident(ev["w"], ev["s"]))
    if lost:
        report.add("lost", where, f"{len(lost)} acknowledged appends missing or changed "
                   f"(first {lost[:8]})")
    seen_ledgers: list[int] = []
    next_entry = 0
    next_seq: dict[str, int] = {}
    writers_done: set[str] = set()
    current_writer = None
    final_ids = []
    for ledger_id, entry_id, data in final.records:
        pos = f"{where} ({ledger_id}, {entry_id})"
        if not seen_ledgers or seen_ledgers[-1] != ledger_id:
            if ledger_id in seen_ledgers:
                report.add("reordered", pos, f"ledger {ledger_id} appears twice in the log")
            seen_ledgers.append(ledger_id)
            next_entry = 0
        if entry_id != next_entry:
            report.add("gap", pos, f"expected entry {next_entry} of ledger {ledger_id}")
        next_entry = entry_id + 1
        ident = parse_payload(data)
        final_ids.append((ledger_id, entry_id, _ident(*ident) if ident else None))
        if ident is None or ident not in invoked:
            report.add("unwritten_bytes", pos, f"{len(data)} bytes {bytes(data[:40])!r} were "
                       "not appended to this log")
            continue
        writer, seq = ident
        if writer != current_writer:
            if writer in writers_done:
                report.add("interleaved_writers", pos, f"{writer} appends again after "
                           f"{current_writer} took over")
            if current_writer is not None:
                writers_done.add(current_writer)
            current_writer = writer
        expected = next_seq.get(writer, 0)
        if seq < expected:
            report.add("reordered", pos, f"{_ident(writer, seq)} after "
                       f"{_ident(writer, expected - 1)}")
        elif seq > expected:
            report.add("gap", pos, f"{_ident(writer, seq)} follows a missing "
                       f"{_ident(writer, expected)}")
        next_seq[writer] = max(expected, seq + 1)
    prefixes = _prefix_digests(final_ids, {ev["n"] for ev in reads if "n" in ev})
    for ev in reads:
        if "recs" in ev:
            seen = [tuple(r) for r in ev["recs"]]
            n, ok = len(seen), seen == [tuple(r) for r in final_ids[:len(seen)]]
        else:
            n, ok = ev["n"], prefixes.get(ev["n"]) == ev["h"]
        if not ok:
            report.add("log_read_not_prefix", f"{where} read by {ev['p']}",
                       f"the {n} records read are not the first {n} of the final log of "
                       f"{len(final_ids)} records")


def _prefix_digests(records: list[tuple], lengths: set[int]) -> dict[int, str]:
    """``client_proc.records_digest`` of ``records[:n]`` for every n in ``lengths`` (one pass)."""
    h = hashlib.sha1()
    out = {0: h.hexdigest()[:20]} if 0 in lengths else {}
    for i, (ledger_id, entry_id, ident) in enumerate(records):
        h.update(f"{ledger_id},{entry_id},{ident};".encode())
        if i + 1 in lengths:
            out[i + 1] = h.copy().hexdigest()[:20]
    return out
