"""``bookie bench journal``: the journal alone, next to the raw fdatasync baseline of its disk.

Theory of operation
-------------------
Two phases in one directory, one after the other, each for ``--time`` seconds:

- ``journal``: the bookie's journal code as its worker runs it: a producer thread places journal
  records (ADD_BATCH records of ``--batch`` entries, bookie.storage.records) in a ring
  (bookie.storage.ring, a memfd as the bookie's) and a committer thread runs the journal worker's
  own step, bookie.core.group_commit.GroupCommitter: the GroupCommitPolicy decides, then the
  ring's bytes [durable, write) go as one group through JournalWriter.append (one writev, one
  fdatasync) and the durable cursor is published.  A record's latency runs from when the producer offered it (its
  intended time with ``--rate``) to the end of the fdatasync that covered it.  At most
  ``--throttle`` records wait for the journal (the ring holds exactly that many).
- ``raw``: the disk's grouped-fdatasync bandwidth at the group size the journal phase wrote on
  average (``figures.raw_group_bytes``; the policy's ``--group-bytes`` is when a group *may* go,
  a group is everything queued by then): ``pwrite`` one such buffer at the end of a
  preallocated file, ``fdatasync``, repeat.  One operation is one group; its latency is the
  write plus the sync.  Nothing writes that disk durably faster in groups of that size.

``figures.ratio`` = the journal's disk bandwidth (group bytes written, record headers included)
over the raw phase's: how much of the disk group commit gets.  Both phases write the same file
system, in the same run, so the ratio is free of the day's disk weather as far as two
back-to-back phases can be.

Records are all the same size, built with numpy a chunk at a time: only the entry ids change.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

import numpy as np

from bookie.bench.bookie_bench import MASTER_KEY, EntryBatcher
from bookie.bench.report import NS_PER_S, Meter
from bookie.storage import journal, records
from bookie.core.group_commit import GroupCommitPolicy
from bookie.storage.journal_groups import GroupCommitter
from bookie.storage.ring import DURABLE, WRITE, Ring
from bookie.bench.report import build_result, host_info, now_iso

RING_BYTES = 64 * 1024 * 1024  # journalRingSizeMB's default

PREALLOC_BYTES = 16 * 1024 * 1024  # journalPreAllocSizeMB default
JOURNAL_MAX_BYTES = 2048 * 1024 * 1024  # journalMaxSizeMB default
_LEDGER_ID = 1
_CHUNK_RECORDS = 512  # records placed per producer step at most


class RecordMaker:
    """ADD_BATCH records of ``batch`` entries of ``entry_size`` payload bytes, made in chunks."""

    def __init__(self, entry_size: int, batch: int, digest: str = "crc32"):
        self.batch = batch
        self.entries = EntryBatcher(entry_size, digest)
        lengths, data = self.entries.batch(_LEDGER_ID, 0, batch, -1)
        parts, self.size, self.data_offset = records.add_batch_parts(
            _LEDGER_ID, MASTER_KEY, lengths, data, recovery=False)
        self._template = np.frombuffer(b"".join(parts), dtype=np.uint8)
        self._entry_ids: dict[int, np.ndarray] = {}
        self.payload_bytes = entry_size * batch

    def chunk(self, first_record: int, count: int) -> np.ndarray:
        """Records first_record .. first_record + count - 1, back to back."""
        block = np.tile(self._template, count).reshape(count, self.size)
        entry_size = self.entries.entry_size
        # entry_id is bytes 8..16 of each entry, big-endian.
        first_ids = (first_record + np.arange(count, dtype=np.int64)) * self.batch
        for i in range(self.batch):
            at = self.data_offset + i * entry_size + 8
            block[:, at:at + 8] = (first_ids + i).astype(">i8").view(np.uint8).reshape(count, 8)
        return block.reshape(-1)


def raw_phase(directory: str, group_bytes: int, duration_s: float, meter: Meter,
              clock=time.monotonic_ns) -> dict:
    """Write ``group_bytes`` and fdatasync, over and over, at the end of a preallocated file."""
    path = os.path.join(directory, "raw-baseline")
    buf = np.random.default_rng(1).integers(0, 256, group_bytes, dtype=np.uint8).tobytes()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        allocated = offset = 0
        now = clock()
        meter.start(now)
        end = now + int(duration_s * NS_PER_S)
        while now < end:
            if offset + group_bytes > allocated:
                try:  # the journal preallocates too, writing zeros: same cost on both sides
                    journal.prewrite_zeros(fd, allocated, allocated + PREALLOC_BYTES)
                    allocated += PREALLOC_BYTES
                except OSError:
                    allocated = offset + group_bytes
            start = clock()
            written = os.pwrite(fd, buf, offset)
            os.fdatasync(fd)
            now = clock()
            offset += written
            meter.record(now - start, 1, written)
            meter.tick(now)
        figures = meter.finish(clock())
    finally:
        os.close(fd)
        os.unlink(path)
    figures["disk_mb_per_s"] = figures["mb_per_s"]
    return figures


class JournalLoad:
    """The producer and committer of the ``journal`` phase (see the module doc)."""

    def __init__(self, directory: str, maker: RecordMaker, policy: GroupCommitPolicy,
                 throttle: int, rate: float | None, meter: Meter, clock=time.monotonic_ns):
        self.maker = maker
        self.throttle = throttle
        self.rate = rate
        self.meter = meter
        self.clock = clock
        # anonymous shared memory, as the bookie's ring: nothing is left behind on a crash
        self.ring = Ring.create_memfd("bookie-bench-ring", maker.size * throttle)
        self.ring.set(WRITE, 0)
        self.ring.set(DURABLE, 0)
        self.writer = journal.JournalWriter(directory, 0, JOURNAL_MAX_BYTES, PREALLOC_BYTES)
        self.committer = GroupCommitter(self.writer, self.ring, policy)
        self.offered_ns = np.zeros(throttle, dtype=np.int64)  # by record number % throttle
        self.placed = 0  # records in the ring (published through WRITE)
        self.durable = 0  # records the journal made durable
        self.wake = threading.Event()  # producer -> committer: more records
        self.room = threading.Event()  # committer -> producer: records became durable
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    # -- producer (the add worker's part) -------------------------------------------------------

    def produce(self, end_ns: int) -> None:
        start_ns = self.clock()
        interval_ns = NS_PER_S / self.rate if self.rate else 0.0
        size = self.maker.size
        while not self.stop.is_set():
            now = self.clock()
            if now >= end_ns:
                break
            room = self.throttle - (self.placed - self.durable)
            due = (int((now - start_ns) / interval_ns) + 1 - self.placed) if interval_ns \
                else _CHUNK_RECORDS
            if room <= 0:
                self.room.wait(0.01)
                self.room.clear()
                continue
            if due <= 0:  # paced and ahead of schedule: sleep until the next record is due
                next_ns = start_ns + self.placed * interval_ns
                time.sleep(min(max(next_ns - now, 0) / NS_PER_S, 0.001))
                continue
            n = min(room, due, _CHUNK_RECORDS)
            seq = self.placed
            block = self.maker.chunk(seq, n)
            self.ring.put(seq * size, [block])
            if interval_ns:
                offered = start_ns + (np.arange(seq, seq + n, dtype=np.int64) * interval_ns)
            else:
                offered = np.full(n, now, dtype=np.int64)
            slots = np.arange(seq, seq + n) % self.throttle
            self.offered_ns[slots] = offered.astype(np.int64)
            self.placed = seq + n
            self.ring.set(WRITE, self.placed * size)  # data first, then the cursor
            self.wake.set()

    # -- committer (the journal worker's loop) --------------------------------------------------

    def commit(self) -> None:
        try:
            self._commit_loop()
        except BaseException as e:  # reported by run(), never lost in a thread
            self.failure = e
            self.stop.set()

    def _commit_loop(self) -> None:
        """The journal worker's own step (GroupCommitter), driven by a thread."""
        size = self.maker.size
        while True:
            self.wake.clear()  # before looking, so a record placed after the look wakes us
            wrote, wait_s = self.committer.step(self.clock() / NS_PER_S)
            if wrote:
                self._completed(self.durable, self.writer.position // size, self.clock())
                continue
            if wait_s is None:
                if self.stop.is_set():
                    return
                wait_s = 0.05
            self.wake.wait(wait_s)
            self.meter.tick(self.clock(), self.placed - self.durable)

    def _completed(self, first: int, end: int, done_ns: int) -> None:
        slots = np.arange(first, end) % self.throttle
        self.meter.record_many(done_ns - self.offered_ns[slots],
                               (end - first) * self.maker.payload_bytes)
        self.durable = end
        self.room.set()
        self.meter.tick(done_ns, self.placed - self.durable)

    def run(self, duration_s: float, timeout_s: float) -> dict:
        """Produce for ``duration_s``, then wait (at most ``timeout_s``) for the journal to make
        everything durable.  Returns the meter's figures plus the journal's own."""
        now = self.clock()
        self.meter.start(now)
        committer = threading.Thread(target=self.commit, name="bench-journal", daemon=True)
        committer.start()
        try:
            self.produce(now + int(duration_s * NS_PER_S))
        finally:
            self.stop.set()
            self.wake.set()
            committer.join(timeout_s)
        if committer.is_alive():
            raise RuntimeError(f"the journal did not finish within {timeout_s:g} s")
        if self.failure is not None:
            raise self.failure
        figures = self.meter.finish(self.clock())
        duration = figures["duration_s"]
        figures.update({
            "records": self.durable,
            "groups": self.committer.groups,
            "syncs": self.writer.syncs,
            "mean_group_bytes": self.writer.bytes_written / max(self.committer.groups, 1),
            "disk_mb_per_s": self.writer.bytes_written / duration / 1e6,
        })
        return figures

    def close(self) -> None:
        self.writer.close()
        self.ring.close()


def run(params: dict, *, emit=None) -> dict:
    """The whole ``bench journal`` run in ``params["dir"]``.

    Returns:
        the result dict (see bench/README.md).
    """
    started = now_iso()
    host = host_info(params["dir"])
    work = tempfile.mkdtemp(prefix="bookie-bench-journal-", dir=params["dir"])
    try:
        policy = GroupCommitPolicy(params["group_wait_ms"] / 1000.0, params["group_bytes"],
                                   not params["no_flush_when_queue_empty"], True)
        maker = RecordMaker(params["entrysize"], params["batch"])
        if params.get("throttle") is None:  # what the bookie's ring holds: bytes, not records
            params["throttle"] = max(1, RING_BYTES // maker.size)
        load = JournalLoad(work, maker, policy, params["throttle"], params["rate"],
                           Meter("journal", unit="records", emit=emit))
        try:
            phases = {"journal": load.run(params["time"], params["timeout"])}
        finally:
            load.close()
        # The baseline writes groups of the size the journal actually wrote: the same disk
        # work, minus everything that is the journal's own.
        raw_group_bytes = max(int(phases["journal"]["mean_group_bytes"]), 4096)
        phases["raw"] = raw_phase(work, raw_group_bytes, params["time"],
                                  Meter("raw", unit="groups", emit=emit))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_bw = phases["raw"]["disk_mb_per_s"]
    figures = {
        "ratio": phases["journal"]["disk_mb_per_s"] / raw_bw if raw_bw else 0.0,
        "raw_group_bytes": raw_group_bytes,
        "record_bytes": maker.size,
        "entry_bytes": maker.entries.entry_size,
    }
    params = dict(params, flush_when_queue_empty=not params["no_flush_when_queue_empty"])
    del params["no_flush_when_queue_empty"]
    return build_result("journal", params, phases, host=host, started=started, figures=figures)

