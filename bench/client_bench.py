"""``bookie bench writes`` and ``bookie bench reads``: adds and reads through the real client.

Theory of operation
-------------------
writes (BenchThroughputLatency): ``--ledgers`` ledgers are created with (E, Qw, Qa); the main
thread hands adds to the client in batches (``add_entries_callback``, the client's bulk path)
round-robin over them, keeping at most ``--throttle`` adds outstanding, for ``--time`` seconds
or ``--sendlimit`` adds.  The client reports each confirmed (or failed) range of entry ids
once; the callback notes (range, completion time) into a deque from the client's thread, and
the main thread drains it into the histogram a batch at a time (numpy): every add gets its
own latency, from its issue time to the completion of the range holding it.  With ``--rate``
adds are issued on a fixed schedule and latency counts from each add's intended time (open
loop).  ``--warmup-messages`` adds go first and are not counted.

reads (BenchReadThroughputLatency):
- sequential: read a closed ledger from entry 0 to its last entry, ``--batch`` entries per
  ``read_entries`` call; every entry gets its call's latency.  Without ``--ledger`` the tool
  first writes ``--entries`` entries to a fresh ledger and closes it.
- tail (``--listen N``): following live writers, in ``tail_bench``.

``AddLoad`` (``load.py``) is the writes loop with the client passed in, so the tests drive it
with a fake.
"""

from __future__ import annotations

import collections
import time

from bookie.bench.load import AddLoad, BenchError, open_client, open_ledger, payload_bytes
from bookie.bench.report import NS_PER_S, Meter
from bookie import wire
from bookie.bench.report import build_result, host_info, now_iso
from bookie.client import BookKeeperError


def run_writes(params: dict, metadata_uri: str, *, emit=None, data_dir: str | None = None) -> dict:
    """The whole ``bench writes`` run.  Returns the result dict (see bench/README.md)."""
    started = now_iso()
    host = host_info(data_dir)
    ack_quorum = params["ack_quorum"] or params["quorum"]
    payload = payload_bytes(params["entrysize"])
    bk = open_client(metadata_uri, params["throttle"], params["timeout"], params.get("client_keys"))
    handles = []
    try:
        for _ in range(params["ledgers"]):
            try:
                handles.append(bk.create_ledger(params["ensemble"], params["quorum"], ack_quorum,
                                                params["digest"], params["password"].encode(),
                                                write_flags=params.get("write_flags") or (),
                                                verifiable=bool(params.get("verifiable"))))
            except BookKeeperError as e:
                raise BenchError(f"cannot create a ledger: {e}") from None
        if params["warmup_messages"]:
            AddLoad(handles, lambda t: payload, params["throttle"], None,
                    params["warmup_messages"], None, nbytes=len(payload)).run(None, params["timeout"])
        meter = Meter("writes", unit="adds", emit=emit)
        load = AddLoad(handles, lambda t: payload, params["throttle"], params["rate"],
                       params["sendlimit"], meter, nbytes=len(payload),
                       keep_latencies=bool(params["latency_file"]))
        interrupted = False
        try:
            load.run(params["time"], params["timeout"])
        except KeyboardInterrupt:  # Ctrl-C: what was measured until then is the result
            interrupted = True
        figures = meter.finish(load.clock())
        figures["ledgers"] = [h.ledger_id for h in handles]
        if interrupted:
            figures["interrupted"] = (f"Ctrl-C: {load.completed} adds answered, "
                                      f"{load.issued - load.completed} outstanding not counted")
        elif "deferred_sync" in (params.get("write_flags") or ()):
            t0 = time.monotonic()  # the adds were answered before their fdatasync: make them durable
            try:
                for h in handles:
                    h.force(params["timeout"])
            except BookKeeperError as e:
                raise BenchError(f"force() at the end of the run failed: {e}") from None
            figures["force_ms"] = round((time.monotonic() - t0) * 1000, 3)
        if load.first_error is not None:
            figures["first_error"] = f"{type(load.first_error).__name__}: {load.first_error}"
        for h in handles if not interrupted else ():  # interrupted: adds may still be out
            h.close()
    finally:
        bk.close()
    if params["latency_file"]:
        with open(params["latency_file"], "w", encoding="ascii") as f:
            lat_us = load.latencies() // 1000
            f.write("\n".join(map(str, lat_us.tolist())))
            f.write("\n" if len(lat_us) else "")
    entry_bytes = wire.ENTRY_HEADER_SIZE + wire.DIGEST_SIZES[params["digest"]] + len(payload)
    return build_result("writes", dict(params, ack_quorum=ack_quorum, metadata=metadata_uri),
                        {"writes": figures}, host=host, started=started,
                        figures={"entry_bytes": entry_bytes})


# -- reads ---------------------------------------------------------------------------------------


def _write_ledger(bk, params: dict, count: int, timeout_s: float) -> int:
    """A fresh ledger of ``count`` entries, closed.  Returns its id."""
    try:
        lh = bk.create_ledger(params["ensemble"], params["quorum"], params["ack_quorum"],
                              params["digest"], params["password"].encode())
        payload = payload_bytes(params["entrysize"])
        load = AddLoad([lh], lambda t: payload, params["throttle"], None, count, None,
                       nbytes=len(payload))
        load.run(None, timeout_s)
        if load.failed:
            raise BenchError(f"writing the ledger to read failed: {load.first_error}")
        lh.close()
    except BookKeeperError as e:
        raise BenchError(f"cannot write a ledger to read: {e}") from None
    return lh.ledger_id


def read_sequential(rh, batch: int, window: int, duration_s: float, timeout_s: float,
                    meter: Meter, clock=time.monotonic_ns, *, at_entries: int | None = None,
                    on_reach=None) -> dict:
    """Read ``rh`` from entry 0 to its last-add-confirmed, ``batch`` entries per call and
    ``window`` calls in flight, or until ``duration_s`` is spent.  ``on_reach()`` is called
    once, as soon as ``at_entries`` entries have been read."""
    last = rh.read_last_add_confirmed()
    if last < 0:
        raise BenchError(f"ledger {rh.ledger_id} has no entries to read")
    start = clock()
    meter.start(start)
    end = start + int(duration_s * NS_PER_S)
    in_flight: collections.deque = collections.deque()
    next_entry = 0
    read = 0
    if on_reach is not None and at_entries is not None and at_entries <= 0:
        on_reach()
        on_reach = None
    while True:
        now = clock()
        while len(in_flight) < window and next_entry <= last and now < end:
            hi = min(last, next_entry + batch - 1)
            in_flight.append((now, rh.read_entries_async(next_entry, hi)))
            next_entry = hi + 1
        if not in_flight:
            break
        sent, fut = in_flight.popleft()
        try:
            entries = fut.result(timeout_s)
        except TimeoutError:
            raise BenchError(f"a read of ledger {rh.ledger_id} took over {timeout_s:g} s") from None
        now = clock()
        meter.record(now - sent, len(entries), sum(len(e.data) for e in entries))
        read += len(entries)
        if on_reach is not None and read >= at_entries:
            on_reach()
            on_reach = None
        if now >= meter.next_tick_ns:
            meter.tick(now, sum(1 for _ in in_flight))
    figures = meter.finish(clock())
    figures["last_entry_id"] = last
    return figures


def read_losing_a_replica(rh, params: dict, pause_bookie, emit) -> tuple[dict, str]:
    """``read_sequential`` again, SIGSTOPping (``pause_bookie``) the first bookie of the ledger's
    ensemble once ``lose_replica_at`` entries are read; it is resumed after the phase.

    Returns:
        the phase's figures and the bookie stopped.
    """
    victim = rh.metadata.fragments[0][1][0]
    resume = []

    def lose() -> None:
        resume.append(pause_bookie(victim))
        if emit is not None:
            emit(f"[lost_replica] bookie {victim} stopped (SIGSTOP) after "
                 f"{params['lose_replica_at']} entries")
    try:
        figures = read_sequential(rh, params["batch"], params["window"], params["time"],
                                  params["timeout"], Meter("lost_replica", unit="entries",
                                                           emit=emit),
                                  at_entries=params["lose_replica_at"], on_reach=lose)
    finally:
        for r in resume:
            r()
    return figures, victim


def run_reads(params: dict, metadata_uri: str, *, emit=None, data_dir: str | None = None,
              pause_bookie=None) -> dict:
    """The whole ``bench reads`` run.  Returns the result dict (see bench/README.md).

    Args:
        pause_bookie: with ``lose_replica_at``: bookie id -> stop it; returns what resumes it.
    """
    started = now_iso()
    host = host_info(data_dir)
    params = dict(params, ack_quorum=params["ack_quorum"] or params["quorum"],
                  metadata=metadata_uri)
    bk = open_client(metadata_uri, params["throttle"], params["timeout"], params.get("client_keys"))
    figures: dict = {}
    try:
        if params["listen"]:
            from bookie.bench.tail_bench import read_tail  # lazy: multiprocessing
            phases, ledger_ids = read_tail(bk, metadata_uri, params, emit)
        else:
            ledger_id = params["ledger"]
            if ledger_id is None:
                ledger_id = _write_ledger(bk, params, params["entries"], params["timeout"])
            rh = open_ledger(bk, ledger_id, params)
            phases = {"sequential": read_sequential(
                rh, params["batch"], params["window"], params["time"], params["timeout"],
                Meter("sequential", unit="entries", emit=emit))}
            ledger_ids = [ledger_id]
            if params.get("lose_replica_at") is not None:
                lost, victim = read_losing_a_replica(rh, params, pause_bookie, emit)
                phases["lost_replica"] = lost
                figures["lost_bookie"] = victim
                healthy = phases["sequential"]["ops_per_s"]
                figures["lost_replica_ratio"] = lost["ops_per_s"] / healthy if healthy else 0.0
    finally:
        bk.close()
    return build_result("reads", params, phases, host=host, started=started,
                        figures={"ledgers": ledger_ids, **figures})
