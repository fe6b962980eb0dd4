"""The journal worker: the only thing that makes an add durable.

Loop: see how far the add worker has placed records in the ring (WRITE); when the group-commit
policy says so, write ring bytes [DURABLE, WRITE) as one group with one writev straight from
shared memory, fdatasync, then publish DURABLE and ring the add worker's doorbell.  Rolls, preallocates
and deletes old journal files (those wholly before LastLogMark, keeping journalMaxBackups).

Start-up reads the journal as replay will, from LastLogMark, to find where it ends: damage that
would lose acknowledged adds (junk in the middle, a gap between files, a file of an older
journal format) refuses with exit status 3, which the supervisor does not retry; damage only in
backups wholly before LastLogMark, and files torn while being created, are logged as warnings.
Before it publishes anything as durable it fdatasyncs every file it found (``sync_journal``):
a predecessor killed between a group's write and its fdatasync leaves the group whole in the
page cache, where the scan finds it but a machine crash would lose it.  On a restart while the
add worker lives, the records between the journal's end and WRITE are still in the ring and are
written first.

No room on the journal disk for a group's write (ENOSPC / EDQUOT from the write, not from
fdatasync) does not stop the bookie: the group was not counted durable, so the worker sets
``JOURNAL_NO_ROOM`` in its ring (the supervisor turns the bookie read-only: adds refused
READ_ONLY, reads served) and retries about once a second, the group in a new file from the same
position (``JournalWriter.abandon``); the first group written clears it.  Adds placed before
are answered then; every acknowledged one was durable before its answer, as always.

With several journals (``journalDirectories``) one of these workers runs per journal directory,
journal ``i`` as role ``journal-i`` (``journal`` for journal 0), each on its own ring, doorbell
and LastLogMark (bookie.storage.journal_set); they share nothing but the add worker.
"""

from __future__ import annotations

import os
import select
import time

from bookie.storage.layout import current_dir
from bookie.core.group_commit import GroupCommitPolicy
from bookie.storage.journal_groups import GroupCommitter
from bookie.storage.journal import (CorruptJournalError, JournalFormatError, JournalWriter,
                                    check_journal, delete_old_journals, lastmark_of, sync_journal)
from bookie.storage.trace import JOURNAL_FILE, open_trace
from bookie.storage.noroom import RETRY_S as NO_ROOM_RETRY_S, no_room
from bookie.storage.ring import BASE, DURABLE, JOURNAL_EPOCH, JOURNAL_NO_ROOM, WRITE, Doorbell, Ring
from bookie.storage.journal_set import bell_name, index_of_role

EXIT_CORRUPT = 3
EXIT_SYNC_FAILED = 4  # fatal: see below


def run(ctx) -> int:
    conf = ctx.conf
    journal = index_of_role(ctx.role)
    if journal is None or journal >= len(conf.journal_dirs):
        ctx.log("no journal directory for this role", role=ctx.role, journals=len(conf.journal_dirs))
        return 2
    jdir = current_dir(conf.journal_dirs[journal])
    ledger_dirs = [current_dir(d) for d in conf.ledger_dirs]
    checked_at = time.monotonic()
    start_mark = lastmark_of(ledger_dirs, journal)
    ctx.log("checking journal", directory=jdir)
    try:
        # Read it as replay will (from LastLogMark), so a journal that cannot be replayed stops
        # the bookie here, and damage replay never needs (backups) only warns.
        check = check_journal(jdir, start_mark)
    except JournalFormatError as e:
        ctx.log("refusing to start: journal of an older format", error=str(e))
        return EXIT_CORRUPT
    except CorruptJournalError as e:
        ctx.log("refusing to start: corrupt journal", error=str(e))
        return EXIT_CORRUPT
    for warning in check.warnings:
        ctx.log("warning: journal damage that replay does not need", detail=warning)
    ctx.log("journal checked", end=check.end, seconds=f"{time.monotonic() - checked_at:.2f}")
    end = check.end
    # What the scan found may be in the page cache only (a predecessor killed between a write
    # and its fdatasync): make it durable before DURABLE says so.
    synced_at = time.monotonic()
    try:
        synced = sync_journal(jdir, start_mark)
    except OSError as e:
        ctx.log("could not sync the journal found at start; stopping the bookie", error=str(e))
        return EXIT_SYNC_FAILED
    ctx.log("journal synced what it found", files=len(synced), end=end,
            seconds=f"{time.monotonic() - synced_at:.3f}")
    ring = Ring.attach(ctx.ring_paths[journal])
    epoch = ring.get(JOURNAL_EPOCH)
    if epoch == 0:
        ring.set(BASE, end)
        ring.set(DURABLE, end)
        ring.set(WRITE, end)
    else:
        if end < ring.get(DURABLE):
            ctx.log("journal ends before the published durable cursor",
                    end=end, durable=ring.get(DURABLE))
        ring.set(DURABLE, max(end, ring.get(DURABLE)))
    ring.set(JOURNAL_EPOCH, epoch + 1)
    ring.set(JOURNAL_NO_ROOM, 0)  # a predecessor may have died with no room; this one will see
    writer = JournalWriter(jdir, end, conf.journal_max_size_bytes,
                           conf.journal_prealloc_size_bytes)
    policy = GroupCommitPolicy(conf.journal_max_group_wait_s,
                               conf.journal_buffered_writes_threshold_bytes,
                               conf.journal_flush_when_queue_empty,
                               conf.journal_adaptive_group_writes)
    wake = Doorbell(os.path.join(ctx.run_dir, bell_name(journal)))  # rung by the add worker after placing
    notify = Doorbell(os.path.join(ctx.run_dir, "add.bell"))  # rung here after publishing DURABLE
    poller = select.poll()
    poller.register(wake.fileno(), select.POLLIN)
    poller.register(ctx.signal_fd, select.POLLIN)  # a SIGTERM ends the wait at once
    signals = select.poll()  # the wait between retries while the disk has no room
    signals.register(ctx.signal_fd, select.POLLIN)
    ctx.log("journal ready", start=end, epoch=epoch + 1, directory=jdir)
    ctx.ready()

    committer = GroupCommitter(writer, ring, policy)
    label = str(journal)  # the ``journal`` label of this worker's metrics
    ctx.stat_labels = (label,)
    force_write = ctx.metrics.histogram("bookie_journal_force_write_seconds", label)
    sync_latency = ctx.metrics.histogram("bookie_journal_sync_seconds", label)
    group_size = ctx.metrics.histogram("bookie_journal_group_bytes", label)
    last_housekeeping = 0.0
    trace = open_trace(conf.add_trace_dir, JOURNAL_FILE)  # bench bookie --trace; None: off
    try:
        while True:
            now = time.monotonic()
            if now - last_housekeeping > 1.0:  # also under sustained load, between groups
                last_housekeeping = now
                mark = lastmark_of(ledger_dirs, journal)
                deleted = delete_old_journals(jdir, mark, conf.journal_max_backups, writer.journal_id)
                if deleted:
                    ctx.log("deleted old journals", ids=",".join(map(str, deleted)), mark=mark)
                ctx.write_stats({"journal_syncs_total": writer.syncs,
                                 "journal_groups_total": committer.groups,
                                 "journal_bytes_total": writer.bytes_written,
                                 "journal_position_bytes": writer.position,
                                 "journal_file_id": writer.journal_id})
            try:
                wrote, wait_s = committer.step(now)
            except OSError as e:
                if not no_room(e) or writer.syncing:
                    # After a failed fdatasync (or a failed write other than for want of
                    # space) the kernel may have dropped the dirty pages and forgotten the
                    # error; a restarted journal would then read the page cache and count
                    # unsynced bytes durable.  Stop the bookie instead.
                    ctx.log("journal write failed; stopping the bookie", error=str(e),
                            position=writer.position)
                    return EXIT_SYNC_FAILED
                # No room for a group's write: nothing of it was counted durable.  Read-only
                # (the supervisor sees JOURNAL_NO_ROOM) until a retry writes it, in a new file.
                writer.abandon()
                if not ring.get(JOURNAL_NO_ROOM):
                    ring.set(JOURNAL_NO_ROOM, 1)
                    ctx.log("no room on the journal disk; read-only until there is",
                            error=str(e), position=writer.position, directory=jdir)
                if signals.poll(int(NO_ROOM_RETRY_S * 1000)):  # a SIGTERM ends the wait at once
                    ctx.drain_signals()
                if ctx.stopping:
                    break  # what is not durable was never answered; the next start writes it
                continue
            if wrote and ring.get(JOURNAL_NO_ROOM):
                ring.set(JOURNAL_NO_ROOM, 0)
                ctx.log("journal disk has room again; taking adds", position=writer.position,
                        directory=jdir)
            if wrote:
                force_write.observe(committer.last_group_s)
                sync_latency.observe(writer.last_sync_s)
                group_size.observe(committer.last_group_bytes)
                if trace is not None:
                    trace.write(writer.position, time.monotonic_ns(), int(committer.last_group_s * 1e9),
                                int(writer.last_sync_s * 1e9))
                notify.ring()  # the add worker also looks at DURABLE on its poll timeout
                continue
            if wait_s is None:
                if ctx.stopping:
                    break
                timeout_ms = 100
            else:
                timeout_ms = max(0, int(wait_s * 1000))
            ready = poller.poll(timeout_ms)
            if ready:
                wake.drain()
                if any(fd == ctx.signal_fd for fd, _ in ready):
                    ctx.drain_signals()
    finally:
        writer.close()
        if trace is not None:
            trace.close()
        wake.close()
        notify.close()
    ctx.log("journal stopped", position=writer.position, syncs=writer.syncs)
    return 0
