"""Keeps a running bookie's registration in the metadata store in step with what it should be,
on a thread of its own.

Why a thread: a metadata store can be unreachable for seconds (a ZooKeeper restart, a network
partition).  A running bookie keeps serving through that (adds are journalled locally; nothing
on the add or read path needs the store), so no metadata call may run on the supervisor's main
thread, and above all none in a signal handler: a handler that waits on the store holds up
every later signal (SIGTERM included), and a second handler nested in the first one deadlocks
on the registration's lock.  The main thread only states what it wants (``want_readonly``, one
attribute store); this thread makes the store agree, retrying with backoff while the store is
unreachable, and logs one line per change of state (never a traceback).

It also re-checks now and then that the node is still there and ours: the store re-creates
registrations itself when a new session starts, but a re-creation that fell into an outage is
not retried by the store.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

RECHECK_S = 2.0  # how often a healthy registration is checked
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0


class Registrar(threading.Thread):
    def __init__(self, registration, log: Callable[..., None]):
        super().__init__(name="registrar", daemon=True)
        self.registration = registration
        self._log = log
        self.want_readonly = registration.readonly  # written by the main thread only
        self._stopping = False
        self._failing = False  # the store did not answer the last attempt
        self.start()

    def stop(self) -> None:
        """Ask the thread to end and wait a little for it (it may be inside a store call, which
        returns within the store's timeout; ``close`` of the registration waits for that)."""
        self._stopping = True
        self.join(1.0)

    def run(self) -> None:
        from bookie.metadata import MetadataError  # lazy: orjson

        backoff = BACKOFF_MIN_S
        next_check = time.monotonic() + RECHECK_S
        while not self._stopping:
            want = self.want_readonly
            now = time.monotonic()
            if want == self.registration.readonly and not self._failing and now < next_check:
                time.sleep(0.05)
                continue
            try:
                if want != self.registration.readonly:
                    self.registration.set_readonly(want)
                    self._log("registration moved", readonly=want)
                else:
                    self.registration.reassert()
            except Exception as e:  # noqa: BLE001 - whatever the store says, retry; never die
                if self._stopping:
                    return
                if not self._failing:
                    self._failing = True
                    what = "unreachable" if isinstance(e, MetadataError) else "failed"
                    self._log(f"metadata store {what}; serving on, retrying the registration",
                              error=f"{type(e).__name__}: {e}")
                self._sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if self._failing:
                self._failing = False
                self._log("metadata store reachable again; registration restored",
                          readonly=self.registration.readonly)
            backoff = BACKOFF_MIN_S
            next_check = time.monotonic() + RECHECK_S

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < end:
            if self.want_readonly != self.registration.readonly and not self._failing:
                return
            time.sleep(0.05)
