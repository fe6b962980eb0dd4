"""A ledger deleted while it is being healed is done, not a failure (issue 21; the nemesis'
``decommissionbookie`` exited 2 "ledger 6 does not exist" when its delete step removed a ledger
the shell was copying).  Real bookies and the real store; the delete is forced between the copy
and the metadata write by the replicator's own progress callback, so the race is deterministic.
"""

from __future__ import annotations

import pytest

from bookie import wire
from bookie.autorecovery.replicator import SETTLED, Replicator
from bookie.client.digest import master_key, password_digest
from bookie.client.protocol.quorum import write_set
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient
from bookie.wire import Status


def _closed_ledger(store, bookies, entries=30, E=3, Qw=2) -> int:
    meta = LedgerMetadata(E, Qw, Qw, digest_type="dummy", password_digest=password_digest(b""),
                          fragments=[(0, list(bookies))])
    ledger_id, version = store.create_ledger(meta)
    for e in range(entries):
        for p in write_set(e, E, Qw):
            with RawBookieClient(bookies[p], timeout_s=30) as c:
                entry = wire.pack_entry(ledger_id, e, e - 1, 0, b"", b"del-%d" % e)
                assert c.add(ledger_id, [entry], master_key(b"")) == Status.OK
    meta.state, meta.last_entry_id = LedgerState.CLOSED, entries - 1
    store.write_ledger(ledger_id, meta, version)
    return ledger_id


class _DeletesBeforeItsWrite:
    """The real store, but the first metadata write of ``ledger_id`` finds it deleted (by its
    owner, a moment earlier): the race of the nemesis' delete step, made deterministic."""

    def __init__(self, store, ledger_id: int, deleted: list):
        self._store, self._ledger_id, self._deleted = store, ledger_id, deleted

    def __getattr__(self, name):
        return getattr(self._store, name)

    def write_ledger(self, ledger_id, meta, version):
        if ledger_id == self._ledger_id and not self._deleted:
            self._store.remove_ledger(ledger_id)
            self._deleted.append(ledger_id)
        return self._store.write_ledger(ledger_id, meta, version)


def _heal_as_decommission(rep: Replicator, ledger_id: int, bookie: str) -> str:
    """``rep.heal`` as ``decommissionbookie BOOKIE`` runs it (forced, reading from the bookie,
    which still runs); the replicator closed after.  Returns the outcome."""
    rep.exclude = {bookie}
    try:
        return rep.heal(ledger_id, [bookie], force=True, read_from_missing=True)
    finally:
        rep.close()


@pytest.mark.parametrize("when", ["before_the_metadata_write", "between_copy_batches"])
def test_a_ledger_deleted_while_it_is_healed_is_settled_not_failed(tmp_path, when):
    # before the metadata write: the copies are done, the repointing write finds no ledger
    # ("ledger N does not exist": the shell's exit 2).  Between batches: the target refuses the
    # next copies (NO_LEDGER: the store has no such ledger), which was a copy failure to retry.
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb:
        a, b, c, d = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            ledger_id = _closed_ledger(store, [a, b, c])
            deleted = []

            def delete_once(n_entries, n_bytes):  # after the first batch went to the target
                if not deleted:
                    store.remove_ledger(ledger_id)
                    deleted.append(ledger_id)

            # as ``decommissionbookie b`` heals it: forced, reading from b, which still runs
            if when == "before_the_metadata_write":
                rep = Replicator(_DeletesBeforeItsWrite(store, ledger_id, deleted), batch=100,
                                 timeout_s=30)
            else:
                rep = Replicator(store, batch=5, timeout_s=30, progress=delete_once)
            outcome = _heal_as_decommission(rep, ledger_id, b)
            assert deleted == [ledger_id] and outcome == SETTLED
            assert UnderReplication(store).lost() == {}  # a deleted ledger lost nothing
            assert not store.ledger_exists(ledger_id), "the deleted ledger came back"


def test_an_open_ledger_deleted_while_its_recovery_closes_it_is_settled(tmp_path):
    # ``recover`` / ``decommissionbookie`` fence and close an open ledger naming the bookie
    # first (the client's recovery); deleted under that recovery, its close finds no ledger:
    # the heal is done, not a ledger "to retry" (exit status 1 of ``recover``)
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb:
        a, b, c, d = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            ledger_id = _closed_ledger(store, [a, b, c], entries=6)
            meta, version = store.read_ledger(ledger_id)
            meta.state, meta.last_entry_id = LedgerState.OPEN, -1  # its writer vanished
            store.write_ledger(ledger_id, meta, version)
            deleted = []
            rep = Replicator(_DeletesBeforeItsWrite(store, ledger_id, deleted), timeout_s=30)
            outcome = _heal_as_decommission(rep, ledger_id, b)
            assert deleted == [ledger_id] and outcome == SETTLED
            assert UnderReplication(store).lost() == {}
