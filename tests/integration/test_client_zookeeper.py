"""The client with ZooKeeper as metadata store (real server, fresh root): write, recover
with another client, read, delete."""

from bookie.client import BookKeeper, LedgerFencedError, NoSuchLedgerError
from bookie.testing import LocalBookies

import pytest


def test_write_recover_read_delete_over_zookeeper(zk_uri):
    with LocalBookies(3, metadata_uri=zk_uri) as ens:
        with BookKeeper(ens.metadata_uri, addEntryTimeout=2, readTimeout=2) as bk, \
                BookKeeper(ens.metadata_uri, readTimeout=2) as bk2:
            lh = bk.create_ledger(3, 2, 2, digest="crc32", password=b"pw")
            ids = [f.result(30) for f in [lh.add_entry_async(b"%d" % i) for i in range(200)]]
            assert ids == list(range(200))
            rh = bk2.open_ledger(lh.ledger_id, digest="crc32", password=b"pw")
            assert rh.is_closed and rh.last_add_confirmed == 199
            assert [e.data for e in rh.read_entries(0, 199)] == [b"%d" % i for i in range(200)]
            with pytest.raises(LedgerFencedError):
                lh.add_entry(b"late")
            bk2.delete_ledger(lh.ledger_id)
            with pytest.raises(NoSuchLedgerError):
                bk.open_ledger(lh.ledger_id, digest="crc32", password=b"pw")
