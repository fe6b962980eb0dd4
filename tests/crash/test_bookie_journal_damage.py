"""A bookie restarted on a damaged journal: a torn tail is recovered from, junk in the middle
refuses start-up with the file named (exit status 3), never silent loss."""

import glob
import os

import pytest

from bookie.testing import LocalBookies, LocalBookieError
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.workers import journal
from bookie.wire import Status

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
        f.seek(last.file_offset + journal.GROUP_HEADER_SIZE + len(last.body))
        f.write(journal.pack_group_header(last.end, 5000, 0) + b"\x07" * 100)
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
