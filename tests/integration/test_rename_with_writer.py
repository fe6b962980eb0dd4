"""The documented rename of a bookie loses nothing (issue 39 item 1), on real bookies with an
embedded store: stop it, ``updatecookie`` with its new id, ``updateledgers --from OLD --to
NEW``, start it.

* A write-quorum-1 ledger stays open through the rename: the writer's next add finds OLD gone,
  and its ensemble change loses its compare-and-swap to ``updateledgers``; it takes NEW from the
  re-read metadata instead of writing its stale ensemble (naming OLD) back.  Every acknowledged
  entry reads back, and still does after the renamed bookie's GC looked for over-replicated
  copies.
* With autorecovery on (the default in a cluster; here with ``lostBookieRecoveryDelay=0``) and a
  pause between the commands: ``updatecookie`` leaves OLD's cookie as a record "renamed to NEW",
  so OLD is never gone for good, no ledger is pointed at an empty bookie, and ``updateledgers``
  renames every ledger and then removes the record.
"""

from __future__ import annotations

import time

import orjson

from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.metadata import CookieNotFoundError, open_metadata
from bookie.testing import LocalBookies
from bookie_logs import dumped, metric
import waiting

PW = b"rename"
IDS = ["bk-a", "bk-b", "bk-c"]
GC_WAIT_MS = 1000
GC = {"gcWaitTime": "300", "gcOverreplicatedLedgerWaitTime": str(GC_WAIT_MS)}


def shell(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["shell", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _named(uri: str, ledger_id: int) -> set[str]:
    with open_metadata(uri) as store:
        meta, _ = store.read_ledger(ledger_id)
    return {b for _, ensemble in meta.fragments for b in ensemble}


def _rename(capsys, lb: LocalBookies, tmp_path, i: int, new_id: str, pause_s: float = 0.0):
    """Stop bookie ``i``, updatecookie with ``new_id``, (pause), updateledgers; not started."""
    old_id = lb.bookies[i]
    lb.stop(i)
    lb.bookie_ids[i] = new_id  # lb.bookies is the same list
    conf = tmp_path / f"bookie-{i}.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in lb.overrides(i).items()))
    rc, out, err = shell(capsys, "updatecookie", "--conf", str(conf))
    assert rc == 0 and "updateledgers" in out, (out, err)
    time.sleep(pause_s)
    rc, out, err = shell(capsys, "updateledgers", "--conf", str(conf), "--from", old_id,
                         "--to", new_id)
    assert rc == 0, (out, err)
    return old_id, out


def _reads_back(uri: str, ledger_id: int, want: list[bytes]) -> None:
    with BookKeeper(uri) as bk:
        rh = bk.open_ledger(ledger_id, password=PW, recovery=False)
        assert [bytes(e.data) for e in rh.read_entries(0, len(want) - 1)] == want


def test_a_rename_with_a_write_quorum_1_writer_open_keeps_every_entry(capsys, tmp_path):
    with dumped(LocalBookies(3, conf=GC, bookie_ids=list(IDS), admin_http=True)) as lb, \
            BookKeeper(lb.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PW)
        want = [b"e%d" % e for e in range(5)]
        for data in want:
            lh.add_entry(data)
        i = lb.bookies.index(lh.metadata.fragments[0][1][0])
        old_id, out = _rename(capsys, lb, tmp_path, i, "bk-renamed")
        assert "in 1 ledger(s)" in out, out
        lb.start(i)
        for e in range(5, 10):  # the writer finds OLD gone: an ensemble change, CAS lost
            want.append(b"e%d" % e)
            lh.add_entry(want[-1])
        lh.close()
        assert old_id not in _named(lb.metadata_uri, lh.ledger_id)
        assert "bk-renamed" in _named(lb.metadata_uri, lh.ledger_id)
        _reads_back(lb.metadata_uri, lh.ledger_id, want)
        # the renamed bookie's GC looks at its copies for longer than the over-replication wait
        runs = metric(lb, i, "bookie_gc_runs_total")
        t0 = time.monotonic()
        assert waiting.poll(lambda: metric(lb, i, "bookie_gc_runs_total") >= runs + 3 and
                            time.monotonic() - t0 > 2 * GC_WAIT_MS / 1000, 120)
        assert metric(lb, i, "bookie_gc_overreplicated_ledgers_total") == 0.0
        _reads_back(lb.metadata_uri, lh.ledger_id, want)


def test_a_rename_with_autorecovery_on_and_a_pause_points_no_ledger_at_an_empty_bookie(
        capsys, tmp_path):
    conf = {**GC, "autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": "0",
            "auditorPeriodicBookieCheckInterval": "1"}
    with dumped(LocalBookies(3, conf=conf, bookie_ids=list(IDS))) as lb, \
            BookKeeper(lb.metadata_uri) as bk:
        closed = bk.create_ledger(1, 1, 1, password=PW)
        while closed.metadata.fragments[0][1][0] != IDS[0]:  # both on bookie 0
            closed.close()
            closed = bk.create_ledger(1, 1, 1, password=PW)
        want = [b"c%d" % e for e in range(5)]
        for data in want:
            closed.add_entry(data)
        closed.close()
        lh = bk.create_ledger(3, 1, 1, password=PW)  # open, one entry on each bookie
        open_want = [b"o%d" % e for e in range(6)]
        for data in open_want:
            lh.add_entry(data)
        old_id, out = _rename(capsys, lb, tmp_path, 0, "bk-renamed", pause_s=8.0)
        assert "in 2 ledger(s)" in out and "removed" in out, out  # autorecovery moved none
        with open_metadata(lb.metadata_uri) as store:
            try:
                store.read_cookie(old_id)
                raise AssertionError("the rename record outlived updateledgers")
            except CookieNotFoundError:
                pass
            new_cookie = orjson.loads(store.read_cookie("bk-renamed")[0])
            assert new_cookie["bookie_id"] == "bk-renamed"
        lb.start(0)
        for e in range(6, 12):
            open_want.append(b"o%d" % e)
            lh.add_entry(open_want[-1])
        lh.close()
        for ledger_id, data in ((closed.ledger_id, want), (lh.ledger_id, open_want)):
            assert old_id not in _named(lb.metadata_uri, ledger_id)
            _reads_back(lb.metadata_uri, ledger_id, data)


def test_a_bookie_started_before_updateledgers_keeps_the_copies_its_old_id_is_named_for(
        capsys, tmp_path):
    """Out of the documented order: started under NEW before ``updateledgers``, the bookie
    holds a closed ledger that names it only by its old id; its GC must not take that for
    over-replication (OLD's cookie is a rename record to NEW)."""
    with dumped(LocalBookies(2, conf=GC, bookie_ids=["bk-a", "bk-b"], admin_http=True)) as lb, \
            BookKeeper(lb.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PW)
        want = [b"e%d" % e for e in range(5)]
        for data in want:
            lh.add_entry(data)
        lh.close()
        i = lb.bookies.index(lh.metadata.fragments[0][1][0])
        old_id = lb.bookies[i]
        lb.stop(i)
        lb.bookie_ids[i] = "bk-renamed"
        conf = tmp_path / "renamed.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in lb.overrides(i).items()))
        rc, out, err = shell(capsys, "updatecookie", "--conf", str(conf))
        assert rc == 0, (out, err)
        lb.start(i)  # before updateledgers
        runs = metric(lb, i, "bookie_gc_runs_total")
        t0 = time.monotonic()
        assert waiting.poll(lambda: metric(lb, i, "bookie_gc_runs_total") >= runs + 3 and
                            time.monotonic() - t0 > 2 * GC_WAIT_MS / 1000, 120)
        assert metric(lb, i, "bookie_gc_overreplicated_ledgers_total") == 0.0
        rc, out, err = shell(capsys, "updateledgers", "--conf", str(conf), "--from", old_id,
                             "--to", "bk-renamed")
        assert rc == 0 and "in 1 ledger(s)" in out, (out, err)
        _reads_back(lb.metadata_uri, lh.ledger_id, want)
