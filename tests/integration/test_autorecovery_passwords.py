"""Healing ledgers whose password nobody told autorecovery: the copies and the recovery of open
ledgers prove their right with the cluster recovery credential (docs/autorecovery.md "Keys").

The default run heals through ``bookie shell recover`` (same replicator, no delays to wait
out); the daemon's version, with a second loss afterwards, is opt-in (-m autorecovery_slow)."""

from __future__ import annotations

import secrets
import time

import pytest

from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies

from test_autorecovery import FAST, assert_every_entry_on_qw_live_copies, dump_logs, names, wait_for


def write(bk, password, count=3, entries=30, close=True, digest=None):
    ids, handles = [], []
    for n in range(count):
        h = bk.create_ledger(3, 2, 2, password=password, **({"digest": digest} if digest else {}))
        for e in range(entries):
            h.add_entry(b"%d-%d-" % (n, e) + password)
        if close:
            h.close()
        ids.append(h.ledger_id)
        handles.append(h)
    return ids


def read_back(uri, ids, password, entries=30):
    with BookKeeper(uri) as bk:
        for n, lid in enumerate(ids):
            h = bk.open_ledger(lid, password=password)
            assert [x.data for x in h.read_entries(0, entries - 1)] == \
                [b"%d-%d-" % (n, e) + password for e in range(entries)], lid


def test_shell_recover_heals_ledgers_whose_password_it_was_never_told(tmp_path, capsys):
    password = secrets.token_hex(8).encode()
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb:
        try:
            uri = lb.metadata_uri
            with BookKeeper(uri) as bk:
                closed = write(bk, password)
            writer = BookKeeper(uri)
            opened = write(writer, password, count=1, entries=20, close=False)
            lost = writer.ledger_metadata(opened[0]).fragments[0][1][0]  # in the open one's ensemble
            writer.close()  # the writer is gone; its ledger stays open
            lb.kill(lb.bookies.index(lost))
            assert main(["shell", "recover", lost, "--metadata", uri]) == 0, capsys.readouterr()
            with BookKeeper(uri) as bk:
                assert not any(names(bk, i, lost) for i in closed + opened)
                assert bk.ledger_metadata(opened[0]).is_closed
                assert_every_entry_on_qw_live_copies(bk, closed + opened, {lost})
            lb.kill(next(i for i, b in enumerate(lb.bookies) if b != lost))  # a second loss
            read_back(uri, closed, password)
            read_back(uri, opened, password, entries=20)
        except BaseException:
            dump_logs(lb)
            raise


def heal_without_passwords(uri, tmp_path, extra=None):
    password = secrets.token_hex(8).encode()
    conf = {**FAST, "openLedgerRereplicationGracePeriod": "3000", **(extra or {})}
    with LocalBookies(4, metadata_uri=uri, base_dir=str(tmp_path / "b"), conf=conf) as lb:
        try:
            uri = lb.metadata_uri
            with BookKeeper(uri) as bk:
                closed = write(bk, password, count=4)
            writer = BookKeeper(uri)
            opened = write(writer, password, count=1, entries=20, close=False)
            mac_open = write(writer, password, count=1, entries=5, close=False, digest="mac")
            both = set(writer.ledger_metadata(mac_open[0]).fragments[0][1])
            # in both open ledgers' ensembles (3 of 4 bookies each: at least 2 in common)
            victim = next(b for b in writer.ledger_metadata(opened[0]).fragments[0][1] if b in both)
            writer.close()
            lb.kill(lb.bookies.index(victim))
            killed_at = time.monotonic()
            with BookKeeper(uri) as bk:
                wait_for(lambda: not any(names(bk, i, victim) for i in closed),
                         what=f"no closed ledger to name {victim}")
                print(f"closed ledgers healed {time.monotonic() - killed_at:.1f} s after the kill")
                assert_every_entry_on_qw_live_copies(bk, closed, {victim})
                wait_for(lambda: not names(bk, opened[0], victim), what="the open ledger healed")
                print(f"open ledger healed {time.monotonic() - killed_at:.1f} s after the kill")
                assert bk.ledger_metadata(opened[0]).is_closed
                assert_every_entry_on_qw_live_copies(bk, opened, {victim})
                with open_metadata(uri) as store:  # an open mac ledger: reported, not looped on
                    wait_for(lambda: mac_open[0] in UnderReplication(store).lost(),
                             what="the open mac ledger reported")
                    assert "open mac ledger" in UnderReplication(store).lost()[mac_open[0]]["reason"]
            alive = [i for i, b in enumerate(lb.bookies) if b != victim]
            logs = "".join(lb.log(i) for i in alive)
            assert "password unknown" not in logs.replace("open mac ledger; password unknown", "")
            lb.kill(alive[0])  # a second loss: every entry still has a live copy
            read_back(uri, closed, password)
            read_back(uri, opened, password, entries=20)
        except BaseException:
            dump_logs(lb)
            raise


@pytest.mark.autorecovery_slow
def test_the_daemon_heals_ledgers_whose_password_it_was_never_told(tmp_path):
    heal_without_passwords(None, tmp_path)


@pytest.mark.autorecovery_slow
def test_the_daemon_heals_them_on_zookeeper_too(tmp_path, zk_uri):
    # on ZooKeeper the recovery secret needs the bookies' own principal (docs/security.md)
    digest = tmp_path / "bookies.digest"
    digest.write_text("bookies:heal-without-passwords\n")
    digest.chmod(0o600)
    heal_without_passwords(zk_uri, tmp_path, {"zkBookieDigestAuthFile": str(digest)})
