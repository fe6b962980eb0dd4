"""A bookie restarted on a damaged journal: a torn tail is recovered from whatever the entries
in it hold, junk in the middle refuses start-up with the file named (exit status 3), damage in a
backup wholly before LastLogMark is a warning; never silent loss."""

import glob
import os

import pytest

from bookie.testing import LocalBookies, LocalBookieError
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.storage import journal
from bookie.wire import Status
from journal_forgery import adversarial_payload
from waiting import poll

KEY = b"journal-damage-key"


def _fill_and_kill(ens, ledger, n_batches=30):
    """Acknowledged adds, then SIGKILL: they are in the journal, and (with a long flush
    interval) after the last checkpoint, so a restart must replay them."""
    entries = []
    with RawBookieClient(ens.bookies[0]) as c:
        for k in range(n_batches):
            batch = [make_entry(ledger, k * 10 + i, os.urandom(100)) for i in range(10)]
            assert c.add(ledger, batch, KEY) == Status.OK
            entries += batch
    ens.kill(0)
    return entries


def _journal_file(ens):
    files = sorted(glob.glob(os.path.join(ens.bookie_dir(0), "journal", "current", "*.txn")))
    return files[-1]


@pytest.fixture
def ens(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={"metadataServiceUri": "", "flushInterval": 600000}) as e:
        yield e


def test_a_torn_tail_is_recovered_from(ens):
    entries = _fill_and_kill(ens, 1)
    path = _journal_file(ens)
    groups = list(journal.scan_file(path))
    last = groups[-1]
    # Tear the last group (its add was acknowledged, but a crash mid-write of a *later* group
    # looks the same from here): append a half-written group after the last whole one.
    with open(path, "r+b") as f:
        salt = journal.read_file_header(path, f.read(journal.FILE_HEADER_SIZE)).salt
        f.seek(last.file_offset + journal.GROUP_HEADER_SIZE + len(last.body))
        f.write(journal.pack_group_header(last.end, 5000, 0, salt) + b"\x07" * 100)
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.read(1, 0, 1000) == (Status.OK, entries)


def test_junk_in_the_middle_refuses_to_start_naming_the_file(ens):
    _fill_and_kill(ens, 2)
    path = _journal_file(ens)
    third = list(journal.scan_file(path))[2]
    with open(path, "r+b") as f:
        f.seek(third.file_offset + 30)
        f.write(b"\xff" * 16)
    with pytest.raises(LocalBookieError) as e:
        ens.start(0)
    assert "exited with status 3" in str(e.value)
    assert os.path.basename(path) in ens.log(0)
    assert "refusing to start: corrupt journal" in ens.log(0)


def test_entries_that_look_like_journal_groups_do_not_stop_a_torn_tail_recovery(ens):
    # The last add's entry is made of valid-looking journal groups.  Tear the group carrying it
    # (as a crash mid-write would, leaving preallocated zeros): the fakes before the tear must
    # not make the bookie take the torn tail for junk in the middle and refuse to start.
    ledger = 3
    entries = []
    with RawBookieClient(ens.bookies[0]) as c:
        for k in range(5):
            batch = [make_entry(ledger, k * 10 + i, os.urandom(100)) for i in range(10)]
            assert c.add(ledger, batch, KEY) == Status.OK
            entries += batch
        path = _journal_file(ens)
        expect = list(journal.scan_file(path))[-1].end
        payload = adversarial_payload(expect)
        assert c.add(ledger, [make_entry(ledger, 50, payload)], KEY) == Status.OK
    ens.kill(0)
    last = list(journal.scan_file(path))[-1]
    assert payload in bytes(last.body)
    group_end = last.file_offset + journal.GROUP_HEADER_SIZE + len(last.body)
    with open(path, "r+b") as f:
        f.seek(group_end - 40)
        f.write(b"\0" * 40)
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        # The torn add may still be found in the entry log (written there before its journal
        # write, never acknowledged); everything before it must be there.
        status, found = c.read(ledger, 0, 1000)
        assert status == Status.OK and found[:len(entries)] == entries
        assert found[len(entries):] in ([], [make_entry(ledger, 50, payload)])
        again = make_entry(ledger, 50, payload)  # the writer retries the add that was torn
        assert c.add(ledger, [again], KEY) == Status.OK
        assert c.read(ledger, 0, 1000) == (Status.OK, entries + [again])


def _wait(pred, timeout_s=20.0):
    return poll(pred, timeout_s)


def test_damage_in_a_backup_journal_before_the_mark_is_a_warning_not_a_refusal(tmp_path):
    conf = {"metadataServiceUri": "", "flushInterval": 100, "journalMaxSizeMB": 1,
            "journalPreAllocSizeMB": 1, "journalMaxBackups": 50}
    ledger = 4
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        jdir = os.path.join(ens.bookie_dir(0), "journal", "current")
        ldir = os.path.join(ens.bookie_dir(0), "ledgers", "current")
        entries = []
        with RawBookieClient(ens.bookies[0]) as c:
            for k in range(30):  # ~3 MB: several 1 MB journal files
                batch = [make_entry(ledger, k * 10 + i, os.urandom(10_000)) for i in range(10)]
                assert c.add(ledger, batch, KEY) == Status.OK
                entries += batch
        files = sorted(glob.glob(os.path.join(jdir, "*.txn")))
        assert len(files) >= 3
        with open(files[-1], "rb") as f:
            newest_start = journal.read_file_header(files[-1], f.read(journal.FILE_HEADER_SIZE))[1]
        # Checkpoints move LastLogMark into the newest file: the older ones are backups.
        assert _wait(lambda: journal.read_lastmark(ldir) >= newest_start)
        ens.kill(0)
        backup = files[0]
        second = list(journal.scan_file(backup))[1]
        with open(backup, "r+b") as f:
            f.seek(second.file_offset + journal.GROUP_HEADER_SIZE + 1000)
            f.write(b"\xee" * 64)
        ens.start(0)
        log = ens.log(0)
        assert any("warning" in line and os.path.basename(backup) in line
                   for line in log.splitlines())
        with RawBookieClient(ens.bookies[0]) as c:
            assert c.read(ledger, 0, 1000) == (Status.OK, entries)
