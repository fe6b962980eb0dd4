"""A bookie whose ledger disk is full (read-only, a real small tmpfs) still answers fences: a
recovering ``open_ledger`` succeeds and reads every acknowledged entry, and the writer's error
names the read-only state (issue 32 item 4; core/adds.py invariant 5, storage/noroom.py); and a
ledger whose only bookie went read-only so is closed by a recovering reader: its re-adds of the
entries that bookie holds are answered OK without writing (issue 39 item 7)."""

import os
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.errors import BookKeeperError
from bookie.testing import LocalBookies
from tmpfs import mounted_tmpfs

PW = b"pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 30.0}


def fill(path: str, leave: int) -> str:
    filler = os.path.join(path, "filler")
    st = os.statvfs(path)
    with open(filler, "wb") as f:
        left = st.f_bavail * st.f_frsize - leave
        while left > 0:
            left -= f.write(b"\0" * min(1 << 20, left))
    return filler


@pytest.fixture(params=[4])
def bookies(tmp_path, request):
    base = tmp_path / "e"
    ledgers0 = base / "bookie-0"
    ledgers0.mkdir(parents=True)
    with mounted_tmpfs(ledgers0 / "ledgers", "16m") as mnt:
        ens = LocalBookies(request.param, base_dir=str(base), start_timeout_s=120,
                           conf={"indexMapSizeMB": 64, "logSizeLimit": 256 * 1024,
                                 "diskUsageThreshold": 1.0})
        with ens:
            yield ens, mnt


def write_until_refused(lh) -> tuple[dict, Exception]:
    """Add entries until the full disk refuses one; returns (acked entries, the error)."""
    acked: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        data = os.urandom(2000)
        try:
            acked[lh.add_entry(data)] = data
        except BookKeeperError as e:
            return acked, e
    raise AssertionError("the writer never met the full disk")


def test_a_full_ledger_disk_still_answers_fences_and_the_writer_hears_read_only(bookies):
    """E3 Qw2 Qa1: a recovery needs every bookie of the ensemble to answer its fence.  The
    fourth bookie is stopped while the writer writes (it has no spare: it fails), and started
    before the recovery (its re-adds refused READ_ONLY by the full bookie go there)."""
    ens, disk = bookies
    assert ens.stop(3) == 0
    filler = fill(disk, 1 << 20)
    with BookKeeper(ens.metadata_uri, CONFIG) as writer_bk:
        lh = writer_bk.create_ledger(3, 2, 1, password=PW)
        assert ens.bookies[0] in lh.metadata.last_ensemble
        acked, error = write_until_refused(lh)
        assert acked, str(error)
        text = str(error)
        assert "read-only" in text and ens.bookies[0] in text, text
        assert "CURVE" not in text, text
        assert ens.running(0), ens.log(0)[-3000:]
        ens.start(3)
        with BookKeeper(ens.metadata_uri, CONFIG) as reader_bk:
            rh = reader_bk.open_ledger(lh.ledger_id, password=PW)  # recovery: fences bookie 0
            assert rh.last_add_confirmed >= max(acked)
            got = {e.entry_id: e.data for e in rh.read_entries(0, max(acked))}
            for eid, data in acked.items():
                assert got[eid] == data, eid
    os.unlink(filler)


@pytest.mark.parametrize("bookies", [1], indirect=True)
def test_a_recovering_reader_closes_a_ledger_whose_only_bookie_went_read_only(bookies):
    """E1 Qw1 Qa1 on the full bookie: the recovery fences it, reads past the LAC and re-adds
    what it read (RECOVERY_ADD, the same bytes) to the same bookie: answered OK without writing
    though read-only, so the ledger closes with every acknowledged entry."""
    ens, disk = bookies
    filler = fill(disk, 1 << 20)
    with BookKeeper(ens.metadata_uri, CONFIG) as writer_bk:
        lh = writer_bk.create_ledger(1, 1, 1, password=PW)
        acked, error = write_until_refused(lh)
        assert acked and "read-only" in str(error), str(error)
        with BookKeeper(ens.metadata_uri, CONFIG) as reader_bk:
            rh = reader_bk.open_ledger(lh.ledger_id, password=PW)  # recovery: fence, re-add, close
            assert rh.last_add_confirmed >= max(acked)
            assert reader_bk.ledger_metadata(lh.ledger_id).is_closed
            got = {e.entry_id: e.data for e in rh.read_entries(0, max(acked))}
            for eid, data in acked.items():
                assert got[eid] == data, eid
    assert ens.running(0), ens.log(0)[-3000:]
    os.unlink(filler)
