"""ZooKeeper-specific behaviour: sessions, disconnects, timeouts and the ledger layouts."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from bookie.metadata import (
    LedgerMetadata, MetadataError, MetadataTimeoutError, open_metadata)
from bookie.testing.zookeeper import ZooKeeperServer, drop_connection, expire_session

BOOKIE = "127.0.0.1:3181"


def wait_for(predicate, timeout_s: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def test_registration_goes_with_an_expired_session_and_comes_back_on_reconnect(zk_uri):
    with open_metadata(zk_uri, timeout_s=5.0) as bookie, open_metadata(zk_uri) as observer:
        bookie.register_bookie(BOOKIE, info={"v": 1})
        path = f"{observer.root}/available/{BOOKIE}"
        events: list[str] = []
        assert observer.client.exists(path, watch=lambda event: events.append(event.type))
        old_session = bookie.session_id()

        expire_session(bookie.client)

        wait_for(lambda: "DELETED" in events, what="the registration to be deleted")
        assert bookie.session_id() != old_session

        def registered_by_new_session():
            stat = observer.client.exists(path)
            return stat is not None and stat.ephemeralOwner == bookie.session_id()
        wait_for(registered_by_new_session, what="the bookie to register again")
        assert observer.list_bookies() == [BOOKIE]
        assert observer.bookie_info(BOOKIE) == {"v": 1}


def test_call_during_a_brief_disconnect_succeeds_after_reconnect(zk_uri):
    with open_metadata(zk_uri, timeout_s=5.0) as store:
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        drop_connection(store.client, wait_reconnect=False)
        meta, version = store.read_ledger(ledger_id)  # queued or retried until reconnected
        assert version == 0
        assert store.write_ledger(ledger_id, meta, version) == 1


def test_unreachable_server_is_a_timeout_error_not_a_hang():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    with pytest.raises(MetadataTimeoutError, match=f"127.0.0.1:{port}"):
        open_metadata(f"zk://127.0.0.1:{port}/ledgers", timeout_s=1.0)


def test_calls_fail_clearly_within_their_timeout_when_the_server_is_gone():
    with ZooKeeperServer() as server:
        # The open's handshake gets the ordinary timeout (a cold JVM on a loaded machine can
        # take over a second to establish the first session); the calls after it get 1 s.
        store = open_metadata(server.uri("/gone"), timeout_s=10.0, create=True)
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        store.timeout_s = 1.0
        server.stop()
        with pytest.raises(MetadataTimeoutError, match="within 1 s"):  # its own timeout, no hang
            store.read_ledger(ledger_id)
        closer = threading.Thread(target=store.close, daemon=True)
        closer.start()
        closer.join(15)


def test_hierarchical_layout_stores_ledgers_as_bookkeeper_does(zk_uri):
    with open_metadata(zk_uri) as store:
        first, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        second, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        digits = "%010d" % second
        assert store.client.exists(f"{store.root}/{digits[:2]}/{digits[2:6]}/L{digits[6:]}")
        assert second > first
        assert store.children("/idgen") == []  # id nodes are removed once taken


def test_flat_layout_stores_ledgers_under_the_root(zookeeper_server, zk_root):
    with open_metadata(zookeeper_server.uri(zk_root, scheme="zk+flat"), create=True) as store:
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1))
        assert store.client.exists(f"{store.root}/L{ledger_id:010d}")
    # A plain zk:// URI follows the layout the root already has...
    with open_metadata(zookeeper_server.uri(zk_root)) as store:
        assert store.layout == "flat" and list(store.list_ledgers()) == [ledger_id]
    # ...and insisting on the other one is refused.
    with pytest.raises(MetadataError, match="flat layout"):
        open_metadata(zookeeper_server.uri(zk_root, scheme="zk+hierarchical"))
