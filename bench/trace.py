"""``bookie bench bookie --trace``: where a lone add's time goes, step by step.

Theory of operation
-------------------
One add at a time through the client (E=Qw=Qa=1 on one local bookie started with
``addTraceDirectory``), each stamped with ``time.monotonic_ns()`` (CLOCK_MONOTONIC: one clock
for every process of the machine) at every step of its path:

====================  ===========================================================================
stamp                 taken by
====================  ===========================================================================
``call``              the caller, just before ``add_entries_callback``
``io_take``           the client's I/O thread, about to send the merged adds (client/io.py)
``io_sent``           the same, the message built, about to hand it to ZeroMQ
``received``          the add worker, the ADD taken off its socket (storage/trace.py)
``placed``            the add worker, its checks done, about to copy the record into the ring
                      (which wakes the journal)
``synced``            the journal worker, the group holding it written and fdatasynced; the
                      group's fdatasync time is recorded too, so ``synced - sync`` is ``written``
``replied``           the add worker, about to hand the answer to ZeroMQ (after DURABLE and the
                      index commit)
``io_recv``           the client's I/O thread, the answer taken off its socket
``callback``          the add's callback, on the I/O thread
``awake``             the caller, woken by the callback
====================  ===========================================================================

``steps`` turns the stamps of one add into the durations between them (``STEPS``); ``match``
lines up the three sources (the client's own lists, the add worker's lines by entry id, the
journal's lines by the ring position that made the add durable).  Both are plain code; ``run``
drives the client.  Tracing is opt-in at both ends (the I/O thread's ``trace`` list, the
bookie's ``addTraceDirectory``): with it off nothing of this runs.
"""

from __future__ import annotations

import bisect
import threading
import time

import numpy as np

from bookie.bench.load import BenchError, open_client, payload_bytes
from bookie.bench.report import Meter, build_result, host_info, now_iso
from bookie.client import BookKeeperError
from bookie.storage.trace import AddStamp, GroupStamp, read_adds, read_groups

# (name, from stamp, to stamp): a step is the time between two stamps of one add
STEPS = (
    ("caller -> I/O thread sends (hand-over, protocol step, digest)", "call", "io_take"),
    ("client: ADD message built", "io_take", "io_sent"),
    ("wire: client send -> add worker took it", "io_sent", "received"),
    ("add worker: frame, batch and key checks", "received", "placed"),
    ("ring copy, journal wake, group write", "placed", "written"),
    ("journal: fdatasync", "written", "synced"),
    ("add worker: durable -> answer sent", "synced", "replied"),
    ("wire: answer -> client I/O thread", "replied", "io_recv"),
    ("client: answer -> callback", "io_recv", "callback"),
    ("callback -> caller awake", "callback", "awake"),
)
TOTAL = ("total: caller -> caller awake", "call", "awake")
WARMUP_ADDS = 20  # the first adds (connections, first LMDB pages) are not counted


def match(client: list[dict], io_stamps: list[tuple[str, int]], adds: list[AddStamp],
          groups: list[GroupStamp], ledger_id: int) -> list[dict]:
    """Every stamp of each add, for the adds all three sources saw.

    Args:
        client: per add, in order: ``entry_id``, ``call``, ``callback``, ``awake``.
        io_stamps: the I/O thread's (step, ns) in order: io_take, io_sent, io_recv per add.
        adds: the add worker's lines; groups: the journal's.
    """
    take = [ns for step, ns in io_stamps if step == "io_take"]
    sent = [ns for step, ns in io_stamps if step == "io_sent"]
    recv = [ns for step, ns in io_stamps if step == "io_recv"]
    by_entry = {a.first_entry_id: a for a in adds if a.ledger_id == ledger_id}
    groups = sorted(groups, key=lambda g: g.durable_end)
    ends = [g.durable_end for g in groups]
    out = []
    for i, c in enumerate(client):
        a = by_entry.get(c["entry_id"])
        if a is None or i >= min(len(take), len(sent), len(recv)):
            continue
        g = bisect.bisect_left(ends, a.ring_end)
        if g == len(groups):
            continue
        group = groups[g]
        out.append(dict(c, io_take=take[i], io_sent=sent[i], io_recv=recv[i],
                        received=a.received_ns, placed=a.placed_ns, replied=a.replied_ns,
                        synced=group.done_ns, written=group.done_ns - group.sync_ns))
    return out


def steps(stamped: list[dict]) -> dict[str, np.ndarray]:
    """Step name -> durations (ns) over the adds."""
    return {name: np.array([s[b] - s[a] for s in stamped], dtype=np.int64)
            for name, a, b in STEPS + (TOTAL,)}


def figures_us(durations: dict[str, np.ndarray]) -> dict[str, dict]:
    """p50 / p99 / mean in microseconds of each step."""
    out = {}
    for name, d in durations.items():
        if len(d) == 0:
            out[name] = {"p50": None, "p99": None, "mean": None}
            continue
        out[name] = {"p50": float(np.percentile(d, 50)) / 1000,
                     "p99": float(np.percentile(d, 99)) / 1000,
                     "mean": float(d.mean()) / 1000}
    return out


def table(fig: dict[str, dict], count: int) -> str:
    """The breakdown as a text table (microseconds)."""
    width = max(len(n) for n in fig)
    lines = [f"lone add, step by step ({count:,} adds; microseconds)",
             f"  {'step':<{width}}  {'p50':>9}  {'p99':>9}  {'mean':>9}"]
    for name, f in fig.items():
        if f["p50"] is None:
            lines.append(f"  {name:<{width}}  {'-':>9}  {'-':>9}  {'-':>9}")
        else:
            lines.append(f"  {name:<{width}}  {f['p50']:9.1f}  {f['p99']:9.1f}  {f['mean']:9.1f}")
    return "\n".join(lines) + "\n"


def lone_adds(handle, io, payload: bytes, duration_s: float, limit: int | None,
              timeout_s: float, meter: Meter) -> tuple[list[dict], list]:
    """Add one entry at a time for ``duration_s`` (or ``limit`` adds, after the warm-up),
    stamping each.  Returns the caller's stamps per add and the I/O thread's list."""
    client = []
    io.trace = []
    done = threading.Event()
    box = {}

    def callback(first: int, last: int, error) -> None:
        box["callback"] = time.monotonic_ns()
        box["error"] = error
        box["entry_id"] = first
        done.set()

    meter.start(time.monotonic_ns())
    end = time.monotonic() + duration_s
    n = 0
    while time.monotonic() < end and (limit is None or n < limit + WARMUP_ADDS):
        done.clear()
        call = time.monotonic_ns()
        handle.add_entries_callback([payload], callback)
        if not done.wait(timeout_s):
            raise TimeoutError(f"an add got no answer within {timeout_s:g} s")
        awake = time.monotonic_ns()
        if box["error"] is not None:
            meter.record_error()
            raise RuntimeError(f"an add failed: {box['error']}")
        n += 1
        if n > WARMUP_ADDS:
            meter.record(awake - call, 1, len(payload))
            client.append({"entry_id": box["entry_id"], "call": call,
                           "callback": box["callback"], "awake": awake})
        else:
            client.append(None)
        meter.tick(awake)
    io_stamps, io.trace = io.trace, None
    # drop the warm-up adds' own client and I/O stamps (three I/O stamps per add)
    skip = sum(1 for c in client if c is None)
    return [c for c in client if c is not None], io_stamps[3 * skip:]


def run(params: dict, metadata_uri: str, trace_dir: str, *, emit=None, data_dir: str | None = None,
        disk: dict | None = None) -> dict:
    """The whole ``bench bookie --trace`` run against a bookie writing its stamps to
    ``trace_dir``.  Returns the result dict; the table goes to stderr with the summary."""
    started = now_iso()
    host = host_info(data_dir)
    payload = payload_bytes(params["entrysize"])
    bk = open_client(metadata_uri, 1, params["timeout"], params.get("client_keys"))
    try:
        try:
            lh = bk.create_ledger(1, 1, 1, params["digest"], b"bench-trace")
        except BookKeeperError as e:
            raise BenchError(f"cannot create a ledger: {e}") from None
        meter = Meter("trace", emit=emit)
        try:
            # the client's I/O thread, whose opt-in trace list the run fills (client/io.py)
            client, io_stamps = lone_adds(lh, bk._io, payload, params["sync_time"],
                                          params["sync_count"], params["timeout"], meter)
        except (TimeoutError, RuntimeError) as e:
            raise BenchError(str(e)) from None
        phase = meter.finish(time.monotonic_ns())
        lh.close()
    finally:
        bk.close()
    deadline = time.monotonic() + 5  # the workers write a line per add: let the last land
    while True:
        stamped = match(client, io_stamps, read_adds(trace_dir), read_groups(trace_dir), lh.ledger_id)
        if len(stamped) >= len(client) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    fig = figures_us(steps(stamped))
    phase["steps_us"] = fig
    phase["traced"] = len(stamped)
    phases = {"disk": disk} if disk else {}
    phases["trace"] = phase
    result = build_result("bookie", dict(params, trace=True), phases, host=host, started=started,
                          figures={"trace_adds": len(stamped)})
    return result
