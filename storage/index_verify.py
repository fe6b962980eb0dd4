"""The index verified against the entry logs, entry by entry (``bookie shell localconsistencycheck``)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import time


from bookie.storage.inspect import (
    digest_kind, indexed_entries, ledger_dirs_of, log_paths, open_index_readonly)
from bookie.storage.index import Index

from bookie.storage.index_check import Progress, _located_entry_problem

@dataclasses.dataclass
class ConsistencyReport:
    entries: int = 0
    ledgers: int = 0
    digests_checked: int = 0
    digests_unknown: int = 0  # entries of ledgers with a MAC or no digest
    problems: list[str] = dataclasses.field(default_factory=list)
    problem_count: int = 0

    MAX_LISTED = 100

    def problem(self, line: str) -> None:
        self.problem_count += 1
        if len(self.problems) < self.MAX_LISTED:
            self.problems.append(line)


def consistency_check(conf, ledger_id: int | None = None,
                      progress: Progress | None = None) -> ConsistencyReport:
    """Every indexed entry is present in its entry log, is the entry it is indexed as, and (for
    ledgers with a CRC digest) passes its digest.  Read-only; may run beside a live bookie: one
    short read transaction per ledger, and an entry that looks missing is looked up again in a
    fresh one (the bookie may have rolled a new log, or the GC or a compaction moved it).

    Raises:
        IndexUnreadable: no index, or it cannot be opened.
    """
    progress = progress or (lambda *a: None)
    env, index = open_index_readonly(conf)
    checker = _Checker(conf, env, index)
    last_note = 0.0
    try:
        with index.begin() as txn:
            ledgers = [ledger_id] if ledger_id is not None else index.ledger_ids(txn)
        for lid in ledgers:
            checker.report.ledgers += 1
            checker.ledger(lid)
            now = time.monotonic()
            if now - last_note >= 1.0:
                last_note = now
                progress("ledgers", checker.report.ledgers, len(ledgers), checker.report.entries)
    finally:
        checker.close()
        env.close()
    return checker.report


class _Checker:
    def __init__(self, conf, env, index: Index):
        self.conf, self.env, self.index = conf, env, index
        self.logs = dict(log_paths(ledger_dirs_of(conf)))
        self.files: dict[int, int] = {}
        self.report = ConsistencyReport()

    def close(self) -> None:
        for fd in self.files.values():
            os.close(fd)

    def _read(self, ledger_id: int, entry_id: int, loc) -> bytes | None:
        """The entry's bytes, or None when it is gone meanwhile; a problem goes to the report."""
        problem = _located_entry_problem(ledger_id, entry_id, loc, self.logs, self.files)
        if problem:  # look again: a log rolled, moved or deleted since this transaction began
            self.logs = dict(log_paths(ledger_dirs_of(self.conf)))
            with self.index.begin() as txn:
                loc = self.index.locate(txn, ledger_id, entry_id)
            if loc is None:
                return None
            problem = _located_entry_problem(ledger_id, entry_id, loc, self.logs, self.files)
            if problem:
                self.report.problem(problem)
                return None
        return os.pread(self.files[loc[0]], loc[2], loc[1])

    def _located(self, ledger_id: int, chunk: int = 10_000):
        """The ledger's indexed entries, ``chunk`` at a time, each chunk from a short read
        transaction (a long one would keep the bookie's index from reusing its pages)."""
        first = 0
        while True:
            with self.index.begin() as txn:
                found = indexed_entries(self.index, txn, ledger_id, first)
                part = list(itertools.islice(found, chunk))
            yield from part
            if len(part) < chunk:
                return
            first = part[-1][0] + 1

    def ledger(self, ledger_id: int) -> None:
        report = self.report
        kind = None
        unknown: list[int] = []
        for entry_id, loc in self._located(ledger_id):
            report.entries += 1
            entry = self._read(ledger_id, entry_id, loc)
            if entry is None:
                continue
            got = digest_kind(entry)
            if got is None:
                unknown.append(entry_id)
            elif kind is None or got == kind:
                kind = got
                report.digests_checked += 1
            else:
                report.problem(f"ledger {ledger_id} entry {entry_id}: {got} digest where the "
                               f"ledger's other entries have {kind}")
        if kind is None:
            report.digests_unknown += len(unknown)  # a MAC (needs the password) or no digest
            return
        for entry_id in unknown:
            report.problem(f"ledger {ledger_id} entry {entry_id}: digest mismatch (the ledger's "
                           f"other entries pass {kind})")
