"""The cluster recovery secret (bookie.metadata.recovery_secret) on every backend: made once,
racing creators (each on its own connection) agree on it, it is no data for metaformat, and a node
that holds something else is refused in one line."""

from __future__ import annotations

import threading

import pytest

from bookie.metadata import CorruptMetadataError, open_metadata
from bookie.metadata.recovery_secret import SECRET_PATH, recovery_secret


def test_racing_creators_agree_and_it_is_no_data(metadata_uri, metadata_store):
    assert recovery_secret(metadata_store, create=False) is None
    stores = [open_metadata(metadata_uri) for _ in range(3)]
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
    assert recovery_secret(metadata_store) == got[0]
    assert not metadata_store.has_data()  # metaformat without --force still works


def test_a_node_of_the_wrong_size_is_refused(metadata_store):
    metadata_store.create(SECRET_PATH, b"short")
    with pytest.raises(CorruptMetadataError, match="RECOVERYSECRET holds 5 bytes"):
        recovery_secret(metadata_store)
