"""One client process of the workload: ``python -m bookie.testing.nemesis.client_proc SPEC``.

SPEC is a JSON object: ``role`` (``writer``, ``tailer``, ``log_writer``, ``log_reader``,
``recover``), ``name`` (the process's name in the history), ``history`` (its JSON-lines file),
``metadata`` (URI), ``config`` (client keys), and the role's own keys (below).  Each role
records every operation it invokes and how it completes (``history.py``) and runs until
SIGTERM (then it finishes what is in flight, for at most ``drain_s``) or until its work is done.
Clients run as processes of their own so that the nemesis can SIGKILL or SIGSTOP them, and
start them inside a network namespace.

- ``writer``: ``mode`` ``sync`` (``add_entry``), ``async`` (``add_entry_async``, a window of
  ``window`` adds), ``bulk`` (``add_range_async`` of 1..``batch`` payloads), ``adv``
  (``create_ledger_adv``: each window of ids added in a shuffled order, and now and then an id
  the handle must refuse - one added before, one past the window - which must raise and store
  nothing) or ``deferred`` (``write_flags=["deferred_sync"]``: adds complete before the bookies
  synced them, so an entry is recorded acknowledged only once a ``force()`` covered it)
  or ``quota`` (``add_range_async`` of ``batch`` payloads, unpaced, until a bookie refuses an
  add OVER_QUOTA - the bookies run with ``ledgerStorageQuotaBytes``, and without enrolment a
  ledger is its own writer identity - then it records ``quota_refused`` and writes no more:
  the refused adds are never acknowledged, the ledger stays open for the round's recovery,
  which re-adds to the bookie over quota: healing is never refused for a quota);
  ``quorum`` [E, Qw, Qa].  Writes one ledger until an add fails, then starts a new ledger;
  with ``close_at_end`` it closes its ledger on SIGTERM.
- ``tailer``: follows the writer whose history file is ``follow``: tails its newest ledger
  with ``read_new_entries_async`` (``recovery=False``; half its steps ask
  ``read_last_add_confirmed`` first, the others leave the long poll to bring the entries, as
  its answer does once caught up: wire.py WITH_ENTRIES), and now and then reads a random
  confirmed range with ``read_entries``.
- ``log_writer``: ``open_log(log)`` and appends (``append`` / ``append_async``); when fenced
  or failed it opens the log again (a takeover back); ``max_appends`` makes it a one-shot
  writer (the nemesis's log takeover).
- ``log_reader``: ``read_log(log)`` from the start, over and over.
- ``recover``: ``open_ledger(ledger, recovery=True)`` once (the nemesis's concurrent recovery).
- ``deleter``: ``delete_ledger`` of each of ``ledgers``, one every ``pace_s`` (deletes as a
  step of the workload, while the round's faults happen).

A tailer told LAC = n (by ``read_last_add_confirmed`` or a long poll) must be able to read
every entry up to n: when a read of them fails, it retries until ``OP_TIMEOUT_S`` has passed
since it was told, and then records a ``reader_violation``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys
import time

from bookie.client import QuotaExceededError
from bookie.client.errors import BookKeeperError
from bookie.testing.nemesis.history import HistoryWriter, read_events
from bookie.testing.nemesis.payload import fingerprint, make_payload, parse_payload

PASSWORD = b"nemesis"
DIGEST = "crc32c"
OP_TIMEOUT_S = 30.0
ADV_PAST_WINDOW = 1_000_000  # past any client's throttle: create_ledger_adv must refuse it


class _Stop:
    """Set by SIGTERM: the process finishes what is in flight and exits."""
    requested = False


def _on_term(signum, frame) -> None:
    _Stop.requested = True


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


# -- writer -----------------------------------------------------------------------------------

def run_writer(bk, spec: dict, hist: HistoryWriter) -> None:
    rng = random.Random(spec.get("seed", 0))
    e, qw, qa = spec.get("quorum", (3, 2, 2))
    mode = spec.get("mode", "sync")
    pace_s = spec.get("pace_s", 0.005)
    generation = 0
    lh = None
    while not _Stop.requested:
        writer = f"{spec['name']}.{generation}"
        generation += 1
        try:
            if mode == "adv":
                lh = bk.create_ledger_adv(e, qw, qa, digest=DIGEST, password=PASSWORD)
            else:
                lh = bk.create_ledger(e, qw, qa, digest=DIGEST, password=PASSWORD,
                                      write_flags=["deferred_sync"] if mode == "deferred" else ())
        except Exception as exc:  # noqa: BLE001 - every failure is part of the history
            hist.record("error", msg=f"create_ledger: {_err(exc)}")
            lh = None
            time.sleep(0.5)
            continue
        hist.record("create", l=lh.ledger_id, w=writer)
        ok = {"sync": _write_sync, "async": _write_async, "bulk": _write_bulk,
              "adv": _write_adv, "deferred": _write_deferred, "quota": _write_quota}[mode](
            lh, writer, hist, rng, pace_s, spec)
        if not ok:
            time.sleep(0.2)
    if lh is not None and spec.get("close_at_end"):
        try:
            lh.close(timeout_s=spec.get("drain_s", 10.0))
            hist.record("close", l=lh.ledger_id, last=lh.last_add_confirmed)
        except Exception as exc:  # noqa: BLE001
            hist.record("error", msg=f"close {lh.ledger_id}: {_err(exc)}")


def _write_sync(lh, writer, hist, rng, pace_s, spec) -> bool:
    seq = 0
    while not _Stop.requested:
        hist.record("add", l=lh.ledger_id, w=writer, s=seq, n=1)
        t0 = time.monotonic()
        try:
            entry_id = lh.add_entry(make_payload(writer, seq), timeout_s=OP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=1, err=_err(exc), t0=t0)
            return False
        hist.record("ack", l=lh.ledger_id, w=writer, s=seq, n=1, e=entry_id, t0=t0)
        seq += 1
        time.sleep(pace_s)
    return True


def _write_async(lh, writer, hist, rng, pace_s, spec) -> bool:
    window = spec.get("window", 16)
    pending = []  # (seq, t0, future), in entry order
    seq = 0
    ok = True
    while pending or (ok and not _Stop.requested):
        while ok and not _Stop.requested and len(pending) < window:
            hist.record("add", l=lh.ledger_id, w=writer, s=seq, n=1)
            t0 = time.monotonic()
            try:
                pending.append((seq, t0, lh.add_entry_async(make_payload(writer, seq))))
            except Exception as exc:  # noqa: BLE001
                hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=1, err=_err(exc), t0=t0)
                ok = False
            seq += 1
        if not pending:
            break
        s, t0, future = pending.pop(0)
        try:
            entry_id = future.result(OP_TIMEOUT_S)
            hist.record("ack", l=lh.ledger_id, w=writer, s=s, n=1, e=entry_id, t0=t0)
        except Exception as exc:  # noqa: BLE001
            hist.record("fail", l=lh.ledger_id, w=writer, s=s, n=1, err=_err(exc), t0=t0)
            ok = False
        time.sleep(pace_s / 4)
    return ok


def _write_bulk(lh, writer, hist, rng, pace_s, spec) -> bool:
    seq = 0
    batch = spec.get("batch", 32)
    while not _Stop.requested:
        n = rng.randint(1, batch)
        hist.record("add", l=lh.ledger_id, w=writer, s=seq, n=n)
        t0 = time.monotonic()
        try:
            ids = lh.add_range_async([make_payload(writer, seq + i) for i in range(n)]) \
                .result(OP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=n, err=_err(exc), t0=t0)
            return False
        if len(ids) != n:
            hist.record("error", msg=f"add_range_async of {n} payloads returned {ids}")
        hist.record("ack", l=lh.ledger_id, w=writer, s=seq, n=n, e=ids.start, t0=t0)
        seq += n
        time.sleep(pace_s * 2)
    return True


def _write_quota(lh, writer, hist, rng, pace_s, spec) -> bool:
    """Bulk adds as fast as they go until the quota refuses one; then idle until SIGTERM (one
    ledger over quota a round bounds what the mode stores).  False: another failure."""
    seq = 0
    batch = spec.get("batch", 128)
    while not _Stop.requested:
        hist.record("add", l=lh.ledger_id, w=writer, s=seq, n=batch)
        t0 = time.monotonic()
        try:
            ids = lh.add_range_async([make_payload(writer, seq + i) for i in range(batch)]) \
                .result(OP_TIMEOUT_S)
        except QuotaExceededError as exc:
            hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=batch, err=_err(exc), t0=t0)
            hist.record("quota_refused", l=lh.ledger_id, w=writer, s=seq)
            while not _Stop.requested:
                time.sleep(0.1)
            return True
        except Exception as exc:  # noqa: BLE001
            hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=batch, err=_err(exc), t0=t0)
            return False
        hist.record("ack", l=lh.ledger_id, w=writer, s=seq, n=batch, e=ids.start, t0=t0)
        seq += batch
    return True


def _write_adv(lh, writer, hist, rng, pace_s, spec) -> bool:
    """Windows of ``window`` entry ids, each added in a shuffled order (payload seq = entry
    id); acknowledged in id order (a Future completes once its id and every lower one are)."""
    window = spec.get("window", 8)
    base = 0
    while not _Stop.requested:
        ids = list(range(base, base + window))
        rng.shuffle(ids)
        pending = {}
        for entry_id in ids:
            hist.record("add", l=lh.ledger_id, w=writer, s=entry_id, n=1)
            t0 = time.monotonic()
            try:
                pending[entry_id] = (t0, lh.add_entry_async(entry_id, make_payload(writer, entry_id)))
            except Exception as exc:  # noqa: BLE001
                hist.record("fail", l=lh.ledger_id, w=writer, s=entry_id, n=1, err=_err(exc), t0=t0)
                return False
        if rng.random() < 0.3:  # an id the handle must refuse: added before, or past the window
            bad = rng.choice([base, base + window + ADV_PAST_WINDOW])
            try:
                lh.add_entry_async(bad, make_payload(writer, bad))
                hist.record("error", msg=f"create_ledger_adv took refused entry id {bad} of "
                                         f"ledger {lh.ledger_id}")
            except BookKeeperError:
                pass  # refused, as it must be: nothing added
        for entry_id in sorted(pending):
            t0, future = pending[entry_id]
            try:
                future.result(OP_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001
                hist.record("fail", l=lh.ledger_id, w=writer, s=entry_id, n=1, err=_err(exc), t0=t0)
                return False
            hist.record("ack", l=lh.ledger_id, w=writer, s=entry_id, n=1, e=entry_id, t0=t0)
        base += window
        time.sleep(pace_s)
    return True


def _write_deferred(lh, writer, hist, rng, pace_s, spec) -> bool:
    """DEFERRED_SYNC: a window of async adds, then ``force()``; only the entries the force
    covered are recorded acknowledged (an add completed before a force is not durable)."""
    window = spec.get("window", 16)
    seq = 0
    while not _Stop.requested:
        done = []  # (seq, t0, entry id): completed, not yet covered by a force
        futures = []
        for _ in range(rng.randint(1, window)):
            hist.record("add", l=lh.ledger_id, w=writer, s=seq, n=1)
            t0 = time.monotonic()
            try:
                futures.append((seq, t0, lh.add_entry_async(make_payload(writer, seq))))
            except Exception as exc:  # noqa: BLE001
                hist.record("fail", l=lh.ledger_id, w=writer, s=seq, n=1, err=_err(exc), t0=t0)
                return False
            seq += 1
        for s, t0, future in futures:
            try:
                done.append((s, t0, future.result(OP_TIMEOUT_S)))
            except Exception as exc:  # noqa: BLE001
                hist.record("fail", l=lh.ledger_id, w=writer, s=s, n=1, err=_err(exc), t0=t0)
                return False
        try:
            covered = lh.force(timeout_s=OP_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the completed adds stay unacknowledged
            hist.record("error", msg=f"force {lh.ledger_id}: {_err(exc)}")
            return False
        for s, t0, entry_id in done:
            if entry_id <= covered:
                hist.record("ack", l=lh.ledger_id, w=writer, s=s, n=1, e=entry_id, t0=t0)
        time.sleep(pace_s)
    return True


# -- tailer -----------------------------------------------------------------------------------

def _newest_ledger(path: str) -> int | None:
    created = [ev["l"] for ev in read_events(path) if ev["ev"] == "create"]
    return created[-1] if created else None


def run_tailer(bk, spec: dict, hist: HistoryWriter) -> None:
    rng = random.Random(spec.get("seed", 0))
    handle_no = 0
    rh = None
    next_entry = 0
    last_switch_check = 0.0
    while not _Stop.requested:
        now = time.monotonic()
        if rh is None or now - last_switch_check > 1.0:
            last_switch_check = now
            newest = _newest_ledger(spec["follow"])
            if newest is None:
                time.sleep(0.2)
                continue
            if rh is None or newest != rh.ledger_id:
                try:
                    rh = bk.open_ledger(newest, digest=DIGEST, password=PASSWORD, recovery=False)
                except Exception as exc:  # noqa: BLE001
                    hist.record("error", msg=f"open_ledger {newest} (no recovery): {_err(exc)}")
                    rh = None
                    time.sleep(0.5)
                    continue
                handle_no += 1
                next_entry = 0
        try:
            next_entry = _tail_step(rh, handle_no, next_entry, hist, rng)
        except Exception as exc:  # noqa: BLE001
            hist.record("error", msg=f"tail {rh.ledger_id}: {_err(exc)}")
            time.sleep(0.3)


def _record_reads(rh, handle_no, entries, hist) -> None:
    lac = rh.last_add_confirmed
    for entry in entries:
        ident = parse_payload(entry.data)
        hist.record("read", l=rh.ledger_id, h=handle_no, e=entry.entry_id, lac=lac,
                    d=fingerprint(entry.data), id=f"{ident[0]}:{ident[1]}" if ident else None)


def _tail_step(rh, handle_no, next_entry, hist, rng) -> int:
    t0 = time.monotonic()
    if rng.random() < 0.5:  # else the poll alone: caught up, its answer carries the entries
        lac = rh.read_last_add_confirmed()
        hist.record("lac", l=rh.ledger_id, h=handle_no, v=lac, t0=t0)
    try:
        entries = rh.read_new_entries_async(next_entry - 1, timeout_s=1.0, max_entries=256) \
            .result(OP_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        told = rh.last_add_confirmed
        if told < next_entry:
            raise
        hist.record("error", msg=f"tail {rh.ledger_id}: {_err(exc)}")
        entries = _read_told(rh, handle_no, next_entry, min(told, next_entry + 255), told, t0,
                             hist)
    _record_reads(rh, handle_no, entries, hist)
    if entries:
        next_entry = entries[-1].entry_id + 1
    lac = rh.last_add_confirmed
    if lac >= next_entry:  # told more than the long poll returned: it must read
        more = _read_told(rh, handle_no, next_entry, min(lac, next_entry + 255), lac,
                          time.monotonic(), hist)
        _record_reads(rh, handle_no, more, hist)
        if more:
            next_entry = more[-1].entry_id + 1
    if lac >= 0 and rng.random() < 0.2:
        first = rng.randint(0, lac)
        last = min(lac, first + rng.randint(0, 64))
        _record_reads(rh, handle_no, rh.read_entries_async(first, last).result(OP_TIMEOUT_S), hist)
    return next_entry


def _read_told(rh, handle_no, first, last, told, told_at, hist) -> list:
    """Read ``first``..``last`` (<= the LAC the reader was told, ``told``), retrying until
    ``OP_TIMEOUT_S`` after ``told_at``; on failure record a ``reader_violation`` and return []."""
    error = None
    while time.monotonic() - told_at < OP_TIMEOUT_S:
        try:
            return list(rh.read_entries(first, last))  # an iterator: errors come as it is read
        except Exception as exc:  # noqa: BLE001
            error = _err(exc)
            if "NoSuchLedger" in error or _Stop.requested:  # deleted meanwhile, or told to stop
                return []
            time.sleep(0.5)
    hist.record("reader_violation", l=rh.ledger_id, h=handle_no, lac=told, e=first,
                err=error or "timed out", t0=told_at)
    return []


# -- logs -------------------------------------------------------------------------------------

def run_log_writer(bk, spec: dict, hist: HistoryWriter) -> None:
    from bookie.client import open_log  # lazy: asyncio
    name = spec["log"]
    max_appends = spec.get("max_appends")
    pace_s = spec.get("pace_s", 0.005)
    window = spec.get("window", 8)
    generation = 0
    while not _Stop.requested:
        writer = f"{spec['name']}.{generation}"
        generation += 1
        try:
            log = open_log(bk, name, 3, 2, 2, digest=DIGEST, password=PASSWORD,
                           roll_entries=spec.get("roll_entries", 40))
        except Exception as exc:  # noqa: BLE001
            hist.record("error", msg=f"open_log {name}: {_err(exc)}")
            time.sleep(0.5)
            continue
        hist.record("log_open", log=name, w=writer)
        seq, pending, ok = 0, [], True
        while pending or (ok and not _Stop.requested and (max_appends is None or seq < max_appends)):
            while ok and not _Stop.requested and len(pending) < window and \
                    (max_appends is None or seq < max_appends):
                hist.record("append", log=name, w=writer, s=seq)
                t0 = time.monotonic()
                try:
                    pending.append((seq, t0, log.append_async(make_payload(writer, seq))))
                except Exception as exc:  # noqa: BLE001
                    hist.record("log_fail", log=name, w=writer, s=seq, err=_err(exc), t0=t0)
                    ok = False
                seq += 1
            if not pending:
                break
            s, t0, future = pending.pop(0)
            try:
                pos = future.result(OP_TIMEOUT_S)
                hist.record("log_ack", log=name, w=writer, s=s, l=pos.ledger_id, e=pos.entry_id,
                            t0=t0)
            except Exception as exc:  # noqa: BLE001
                hist.record("log_fail", log=name, w=writer, s=s, err=_err(exc), t0=t0)
                ok = False
            time.sleep(pace_s)
        if max_appends is not None and ok:
            try:
                log.close()
            except Exception as exc:  # noqa: BLE001
                hist.record("error", msg=f"close log {name}: {_err(exc)}")
            return
        time.sleep(0.5 if not _Stop.requested else 0)


def run_log_reader(bk, spec: dict, hist: HistoryWriter) -> None:
    """Reads the whole log over and over; records how many records it saw and a digest of
    their (ledger, entry, payload identity) list (``records_digest``): a log living for the
    whole run grows too long to list in every event."""
    from bookie.client import read_log  # lazy: asyncio
    while not _Stop.requested:
        t0 = time.monotonic()
        try:
            recs = []
            for rec in read_log(bk, spec["log"], digest=DIGEST, password=PASSWORD):
                ident = parse_payload(rec.data)
                recs.append((rec.ledger_id, rec.entry_id,
                             f"{ident[0]}:{ident[1]}" if ident else None))
            hist.record("log_read", log=spec["log"], n=len(recs), h=records_digest(recs), t0=t0)
        except Exception as exc:  # noqa: BLE001
            hist.record("error", msg=f"read_log {spec['log']}: {_err(exc)}")
        time.sleep(spec.get("pause_s", 2.0))


def records_digest(recs) -> str:
    """A digest of a list of (ledger_id, entry_id, identity) records (the checker computes the
    same of the final log's prefixes)."""
    h = hashlib.sha1()
    for ledger_id, entry_id, ident in recs:
        h.update(f"{ledger_id},{entry_id},{ident};".encode())
    return h.hexdigest()[:20]


# -- recovery ---------------------------------------------------------------------------------

def run_recover(bk, spec: dict, hist: HistoryWriter) -> None:
    t0 = time.monotonic()
    try:
        rh = bk.open_ledger(spec["ledger"], digest=DIGEST, password=PASSWORD, recovery=True)
        hist.record("recover", l=spec["ledger"], last=rh.last_add_confirmed, t0=t0)
    except Exception as exc:  # noqa: BLE001
        hist.record("error", msg=f"recover {spec['ledger']}: {_err(exc)}", t0=t0)


def run_deleter(bk, spec: dict, hist: HistoryWriter) -> None:
    for ledger_id in spec["ledgers"]:
        if _Stop.requested:
            return
        time.sleep(spec.get("pace_s", 1.0))
        t0 = time.monotonic()
        hist.record("delete", l=ledger_id)
        try:
            bk.delete_ledger(ledger_id)
            hist.record("deleted", l=ledger_id, t0=t0)
        except Exception as exc:  # noqa: BLE001
            hist.record("delete_fail", l=ledger_id, err=_err(exc), t0=t0)


ROLES = {"writer": run_writer, "tailer": run_tailer, "log_writer": run_log_writer,
         "log_reader": run_log_reader, "recover": run_recover, "deleter": run_deleter}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bookie.testing.nemesis.client_proc SPEC_JSON", file=sys.stderr)
        return 2
    try:
        spec = json.loads(argv[0])
        role = ROLES[spec["role"]]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"client_proc: bad spec: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_term)
    from bookie.client import BookKeeper  # lazy: asyncio
    hist = HistoryWriter(spec["history"], spec["name"])
    hist.record("start", pid=os.getpid(), role=spec["role"])
    config = dict(spec.get("config") or {})
    if spec.get("racks"):  # the placement policy enforced: every write quorum over 2 racks
        config.update(ensemblePlacementPolicy="rackaware", minNumRacksPerWriteQuorum=2,
                      enforceMinNumRacksPerWriteQuorum=True)
    try:
        with BookKeeper(spec["metadata"], config) as bk:
            role(bk, spec, hist)
    except Exception as exc:  # noqa: BLE001 - the history says why the process ended
        hist.record("error", msg=f"{spec['role']} ended: {_err(exc)}")
    hist.record("exit")
    hist.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
