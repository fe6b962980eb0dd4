"""The history of a nemesis run: client operations with their invocation and completion times.

Every client process appends to a JSON-lines file of its own, one event per line, written and
flushed at once, so a SIGKILL loses at most a torn last line (``load_history`` skips it).
Times are ``time.monotonic()`` seconds: on Linux that is CLOCK_MONOTONIC, one clock for every
process of the machine, so events of different processes compare.

Every event has ``ev`` (its kind), ``p`` (the process) and ``t`` (when it happened: for a
completion, the completion time; ``t0`` is then the invocation time).  Kinds:

==============  ===============================================================================
``create``      a writer created ledger ``l`` (writer session ``w``)
``add``         invocation of ``n`` adds of writer ``w`` on ledger ``l``, seqs ``s``..``s+n-1``
``ack``         those adds were acknowledged as entries ``e``..``e+n-1`` (``t0``: invocation)
``fail``        those adds failed with ``err`` (they may or may not be in the ledger)
``close``       the writer closed ledger ``l`` at ``last``
``lac``         a non-recovery handle ``h`` read the LAC ``v`` of ledger ``l``
``read``        a non-recovery read of entry ``e`` of ``l``: fingerprint ``d``, payload
                identity ``id`` ("writer:seq" or null if the bytes are no payload), handle LAC
                ``lac`` just after the read
``recover``     ``open_ledger(l, recovery=True)`` returned, the ledger closed at ``last``
``append``      invocation of log append ``s`` of writer ``w`` on log ``log``
``log_ack``     that append was acknowledged at (``l``, ``e``)
``log_fail``    that append failed with ``err``
``log_open``    writer ``w`` became the writer of log ``log``
``log_read``    a ``read_log`` of ``log`` saw ``recs``: [[ledger_id, entry_id, id], ...]
``error``       anything a client process wants the report to show (``msg``)
==============  ===============================================================================
"""

from __future__ import annotations

import glob
import json
import os
import time


class HistoryWriter:
    """Appends events to one process's history file; each line is flushed as it is written."""

    def __init__(self, path: str, process: str):
        self.path = path
        self.process = process
        self._f = open(path, "a", buffering=1)

    def record(self, ev: str, **fields) -> dict:
        """Write one event (time ``t`` taken now unless given) and return it."""
        event = {"ev": ev, "p": self.process, "t": fields.pop("t", None) or time.monotonic()}
        event.update(fields)
        self._f.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def close(self) -> None:
        self._f.close()


def read_events(path: str) -> list[dict]:
    """The events of one history file; a torn or unparsable line (a killed writer) is skipped."""
    out = []
    try:
        with open(path, "r", errors="replace") as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and "ev" in event:
                    out.append(event)
    except OSError:
        pass
    return out


def load_history(directory: str) -> list[dict]:
    """Every event of every ``*.jsonl`` history file in ``directory``, ordered by time."""
    events = []
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        events.extend(read_events(path))
    events.sort(key=lambda e: e["t"])
    return events
