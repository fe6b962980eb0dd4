"""The cluster recovery secret (bookie.metadata.recovery_secret) on every backend: made once in
the bookies' private place (ZooKeeper: with the bookies' own principal), racing creators (each
on its own connection) agree on it, it is no data for metaformat, and one of the wrong size is
refused in one line.  Without a private place (ZooKeeper without zkBookieDigestAuthFile) there
is none, and an older ordinary node is never used."""

from __future__ import annotations

import os
import threading

import pytest

from bookie.metadata import CorruptMetadataError, open_metadata
from bookie.metadata.private import private_store
from bookie.metadata.recovery_secret import SECRET_NAME, SECRET_PATH, protected, recovery_secret
from bookie.metadata.zk_acl import with_bookie_credentials


@pytest.fixture
def bookie_security(tmp_path):
    path = tmp_path / "bookie.digest"
    path.write_text("bookies:bookie-only-password\n")
    os.chmod(path, 0o600)
    return with_bookie_credentials(None, str(path))


def test_racing_creators_agree_and_it_is_no_data(metadata_uri, bookie_security):
    def store():
        return open_metadata(metadata_uri, zk_security=bookie_security)
    with store() as first:
        assert protected(first) is not None
        assert recovery_secret(first, create=False) is None
        stores = [store() for _ in range(3)]
        got: list[bytes] = []
        try:
            threads = [threading.Thread(target=lambda s=s: got.append(recovery_secret(s))) for s in stores]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        finally:
            for s in stores:
                s.close()
        assert len(got) == 3 and len(set(got)) == 1 and len(got[0]) == 32
        assert recovery_secret(first) == got[0]
        assert not first.has_data()  # metaformat without --force still works


def test_a_secret_of_the_wrong_size_is_refused(metadata_uri, bookie_security):
    with open_metadata(metadata_uri, zk_security=bookie_security) as store:
        private_store(store).create(SECRET_NAME, b"short")
        with pytest.raises(CorruptMetadataError, match="RECOVERYSECRET holds 5 bytes"):
            recovery_secret(store)


def test_an_older_open_node_is_never_the_secret(metadata_uri, metadata_store):
    metadata_store.create(SECRET_PATH, b"x" * 32)  # what any client could read
    secret = recovery_secret(metadata_store)
    if metadata_uri.startswith("lmdb"):
        assert secret is not None and secret != b"x" * 32
    else:  # ZooKeeper without the bookies' principal: no place only bookies reach
        assert secret is None and protected(metadata_store) is None
