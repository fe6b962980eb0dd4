"""Checkpoints of the add worker: the sync steps (DESIGN invariant 3) and the thread that runs
them off the add path."""

from __future__ import annotations

import threading
import time

from bookie.storage.journal import write_lastmark
from bookie.storage.noroom import no_room
from bookie.storage.ledger_storage import LedgerStorage


def sync_to_mark(storage: LedgerStorage, ledger_dirs: list[str], marks: list[int]) -> None:
    """The sync steps of a checkpoint, in DESIGN invariant 3's order: fdatasync the entry logs,
    sync the index, then persist each journal's LastLogMark (``marks[i]`` for journal i)."""
    storage.logs.sync()
    storage.index.sync()
    for d in ledger_dirs:
        for journal, mark in enumerate(marks):
            write_lastmark(d, mark, journal)


def checkpoint(storage: LedgerStorage, ledger_dirs: list[str], marks: list[int]) -> None:
    storage.commit()
    sync_to_mark(storage, ledger_dirs, marks)


class Checkpointer(threading.Thread):
    """Runs the sync steps of a checkpoint off the add path, one at a time.

    Order inside (DESIGN invariant 3): fdatasync the entry logs, sync the index, then persist
    LastLogMark.  The caller has committed the index up to the mark before requesting it.
    """

    def __init__(self, ctx, storage: "LedgerStorage", ledger_dirs: list[str]):
        super().__init__(name="checkpoint", daemon=True)
        self.ctx = ctx
        self.latency = ctx.metrics.histogram("bookie_checkpoint_seconds")
        self.storage = storage
        self.ledger_dirs = ledger_dirs
        self._mark = None
        self._cond = threading.Condition()
        self._busy = False
        self._stopping = False
        self.failed = False  # the last checkpoint failed: retry it even if the mark is the same
        self.no_room = False  # ... for want of space
        self.start()

    def busy(self) -> bool:
        return self._busy

    def request(self, mark: int) -> None:
        with self._cond:
            self._mark = mark
            self._busy = True
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.join(30)

    def run(self) -> None:
        while True:
            with self._cond:
                while self._mark is None and not self._stopping:
                    self._cond.wait()
                if self._mark is None:
                    return
                mark, self._mark = self._mark, None
            try:
                t0 = time.perf_counter()
                sync_to_mark(self.storage, self.ledger_dirs, mark)
                self.latency.observe_locked(time.perf_counter() - t0)
                if self.failed:
                    self.ctx.log("checkpoint succeeded again", mark=mark)
                self.failed = self.no_room = False
            except Exception as e:  # noqa: BLE001 - retried at the next flush; never kills the thread
                if not self.failed:
                    self.ctx.log("checkpoint failed; retrying", error=f"{type(e).__name__}: {e}")
                self.failed, self.no_room = True, no_room(e)
            finally:
                self._busy = False
