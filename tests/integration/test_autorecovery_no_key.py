"""Issue 39: autorecovery that holds no key for a ledger (no recovery secret - ZooKeeper without
``zkBookieDigestAuthFile`` - and the ledger's password not in ``autoRecoveryLedgerPasswords``)
copied nothing, yet took the copy for made: it logged "ledger re-replicated" and pointed the
lost bookie's position at a bookie holding none of its entries (the nemesis, seed 4401: 16
``under_replicated`` ledgers), and its entry check logged "entry copy restored" for copies it
never made.  Now such a position keeps naming its bookie (``core.naming.may_unname``: nothing
was copied), the worker says once why, the entry check restores nothing it did not copy, and
``bookie shell recover`` says "to retry" until it is given the password with ``--conf``.

On real bookies and a real ZooKeeper; runs in the default suite (about 15 s)."""

from __future__ import annotations

from bookie import wire
from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.client.digest import master_key, password_digest
from bookie.client.protocol.quorum import write_set
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status

from test_autorecovery import (FAST, assert_every_entry_on_qw_live_copies, dump_logs, names,
                               wait_for)
from test_autorecovery_passwords import write

PASSWORD = b"never-told-to-autorecovery"
NO_KEY = "cannot copy ledger: no key"


def gappy_ledger(uri, bookies, password, entries=12):
    """A closed E3/Qw2/Qa1 ledger with ``password`` whose entries are each on the first bookie
    of their write set only (what a writer leaves when Qa acked while it replaced a bookie)."""
    with open_metadata(uri) as store:
        meta = LedgerMetadata(3, 2, 1, digest_type="dummy", password_digest=password_digest(password),
                              fragments=[(0, list(bookies))])
        ledger_id, version = store.create_ledger(meta)
        for e in range(entries):
            with RawBookieClient(bookies[write_set(e, 3, 2)[0]], timeout_s=30) as c:
                entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"gap-%d" % e)
                assert c.add(ledger_id, [entry], master_key(password)) == Status.OK
        meta.state, meta.last_entry_id = LedgerState.CLOSED, entries - 1
        store.write_ledger(ledger_id, meta, version)
    return ledger_id


def held_by_live_members(bk, ledger_id, dead) -> list[tuple[int, str]]:
    """(entry, bookie) of every live named member of an entry's write set that lacks it."""
    meta = bk.ledger_metadata(ledger_id)
    lacking = []
    for e in range(meta.last_entry_id + 1):
        ensemble = meta.ensemble_for(e)
        for p in write_set(e, meta.ensemble_size, meta.write_quorum):
            if ensemble[p] in dead:
                continue
            with RawBookieClient(ensemble[p], timeout_s=30) as c:
                status, _ = c.read(ledger_id, e)
            if status != Status.OK:
                lacking.append((e, ensemble[p]))
    return lacking


def test_without_a_key_nothing_is_repointed_nor_said_restored(tmp_path, zk_uri, capsys):
    with LocalBookies(4, metadata_uri=zk_uri, base_dir=str(tmp_path / "b"), conf=FAST) as lb:
        try:
            uri = lb.metadata_uri
            with BookKeeper(uri) as bk:
                ids = write(bk, PASSWORD, count=2, entries=12)
                victim = bk.ledger_metadata(ids[0]).fragments[0][1][0]
                # E=3 of 4 bookies: the second ledger may not name the victim at all
                naming = [lid for lid in ids if names(bk, lid, victim)]
                gap = gappy_ledger(uri, [b for b in lb.bookies if b != victim], PASSWORD)
                alive = [i for i, b in enumerate(lb.bookies) if b != victim]
                logs = lambda: "".join(lb.log(i) for i in alive)  # noqa: E731
                lb.kill(lb.bookies.index(victim))
                # before the fix the position was repointed at once, no copy made
                wait_for(lambda: f"{NO_KEY} ledger_id={ids[0]}" in logs()
                         or not names(bk, ids[0], victim), what="the heal of the first ledger")
                assert names(bk, ids[0], victim), "repointed although nothing was copied"
                assert "ledger re-replicated ledger_id=%d " % ids[0] not in logs()
                for lid in ids:
                    assert held_by_live_members(bk, lid, {victim}) == [], lid
                with open_metadata(uri) as store:  # still marked: retried, never dropped
                    assert ids[0] in UnderReplication(store).marks()
                    done = logs().count("entry check done")
                    UnderReplication(store).trigger_audit()
                    wait_for(lambda: logs().count("entry check done") > done,
                             what="an entry check")
                assert f"entry copy restored ledger_id={gap} " not in logs()
                assert f"{NO_KEY} ledger_id={gap}" in logs()
                assert held_by_live_members(bk, gap, {victim}) != []  # said so, not hidden
                # the operator's recover: no key, so "to retry" (exit 1), nothing repointed ...
                assert main(["shell", "recover", victim, "--metadata", uri]) == 1
                assert NO_KEY in capsys.readouterr().err
                assert all(names(bk, lid, victim) for lid in naming)
                # ... and told the password (a bookie's --conf), it heals every ledger
                conf = tmp_path / "secret.conf"
                conf.write_text(f"autoRecoveryLedgerPasswords={PASSWORD.decode()}\n")
                conf.chmod(0o600)
                assert main(["shell", "recover", victim, "--metadata", uri,
                             "--conf", str(conf)]) == 0, capsys.readouterr()
                assert not any(names(bk, lid, victim) for lid in ids)
                assert_every_entry_on_qw_live_copies(bk, ids, {victim})
        except BaseException:
            dump_logs(lb)
            raise
