"""Registrations, cookies and locations are the bookies' to write (issue 33, item 5).

Against the session's real ZooKeeper and a real bookie with ``zkEnableSecurity``,
``zkDigestAuthFile`` (the cluster's principal, which every client holds) and
``zkBookieDigestAuthFile`` (the bookies' own): a holder of the cluster's credentials reads
``/available``, ``/cookies`` and ``/bookielocations`` (a client resolves bookies through them and
writes ledgers), but can neither rewrite a bookie's registration or cookie, nor delete them, nor
create a node under them (squat a bookie id, plant a location).  Before, all of them could.  A
tree made by a client (the parents with the cluster's ACL) is taken back by the first bookie
that opens it.
"""

from __future__ import annotations

import os

import pytest
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from bookie.client import BookKeeper
from bookie.metadata import load_zk_security, open_metadata
from bookie.metadata.zk_acl import BOOKIES_WRITE, with_bookie_credentials
from bookie.testing import LocalBookies


def _cred(path, text) -> str:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return str(path)


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    d = tmp_path_factory.mktemp("regacl")
    return {"cluster": _cred(d / "cluster", "alice:cluster-secret\n"),
            "bookies": _cred(d / "bookies", "bookies:bookie-secret\n")}


@pytest.fixture(scope="module")
def ens(zookeeper_server, creds):
    uri = zookeeper_server.uri(zookeeper_server.chroot("/regacl"))
    conf = {"zkEnableSecurity": "true", "zkDigestAuthFile": creds["cluster"],
            "zkBookieDigestAuthFile": creds["bookies"], "flushInterval": 50}
    with LocalBookies(1, metadata_uri=uri, conf=conf) as e:
        e.root = "/" + uri.split("/", 3)[3]
        yield e


def kazoo(server, cred_file) -> KazooClient:
    with open(cred_file) as f:
        c = KazooClient(hosts=server.hosts, auth_data=[("digest", f.read().strip())], timeout=10)
    c.start(timeout=10)
    return c


def bookie_security(creds):
    return with_bookie_credentials(load_zk_security(True, creds["cluster"]), creds["bookies"])


def test_a_client_reads_registrations_and_cookies_and_writes_ledgers(ens, creds):
    keys = {"zkEnableSecurity": True, "zkDigestAuthFile": creds["cluster"]}
    with BookKeeper(ens.metadata_uri, keys, allowEmptyPassword=True) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"")
        lh.add_entry(b"through a registration the client may only read")
        lh.close()
    with open_metadata(ens.metadata_uri, zk_security=load_zk_security(True, creds["cluster"])) \
            as store:
        assert store.list_bookies() == ens.bookies
        assert store.bookie_info(ens.bookies[0]) is not None


def test_the_clusters_principal_cannot_change_hold_or_remove_a_bookies_nodes(
        ens, creds, zookeeper_server):
    bookie_id = ens.bookies[0]
    with open_metadata(ens.metadata_uri, zk_security=bookie_security(creds)) as store:
        store.create(f"/bookielocations/{bookie_id}", b"/dc1/rack1")  # as setrack does
    client = kazoo(zookeeper_server, creds["cluster"])
    try:
        for top in BOOKIES_WRITE:
            node = ens.root + top
            client.get_children(node)  # readable
            with pytest.raises(kz.NoAuthError):
                client.create(f"{node}/127.0.0.1:1", b"squatted")
            with pytest.raises(kz.NoAuthError):
                client.set_acls(node, OPEN_ACL_UNSAFE)
        for node in (f"{ens.root}/available/{bookie_id}", f"{ens.root}/cookies/{bookie_id}",
                     f"{ens.root}/bookielocations/{bookie_id}"):
            data, _ = client.get(node)  # readable
            assert data
            with pytest.raises(kz.NoAuthError):
                client.set(node, b'{"address": "10.6.6.6:3181"}')
            with pytest.raises(kz.NoAuthError):
                client.delete(node)
        with pytest.raises(kz.NoAuthError):
            client.create(f"{ens.root}/available/readonly/{bookie_id}", b"", ephemeral=True)
    finally:
        client.stop()
        client.close()
    with open_metadata(ens.metadata_uri, zk_security=bookie_security(creds)) as store:
        assert store.list_bookies() == ens.bookies
        store.delete(f"/bookielocations/{bookie_id}")


def test_a_tree_a_client_made_is_taken_back_by_the_first_bookie(zookeeper_server, creds):
    uri = zookeeper_server.uri(zookeeper_server.chroot("/regacl-old"))
    root = "/" + uri.split("/", 3)[3]
    cluster = load_zk_security(True, creds["cluster"])
    open_metadata(uri, create=True, zk_security=cluster).close()  # every node the cluster's
    client = kazoo(zookeeper_server, creds["cluster"])
    try:
        client.create(f"{root}/available/127.0.0.1:1", b"squatted before")
        with open_metadata(uri, zk_security=bookie_security(creds)):
            pass
        for top in ("/available", "/available/readonly", "/cookies"):
            acls, _ = client.get_acls(root + top)
            assert sorted((a.id.id.split(":")[0], a.perms) for a in acls) == [
                ("alice", 1), ("bookies", 31)], top
            with pytest.raises(kz.NoAuthError):
                client.create(f"{root}{top}/127.0.0.1:2", b"squatted after")
    finally:
        client.stop()
        client.close()


def test_turning_the_bookies_principal_on_re_acls_every_child_and_unlists_planted_ones(
        zookeeper_server, creds):
    """Issue 39 item 5: nodes made under the three parents before zkBookieDigestAuthFile (here
    by a client, with the cluster's ACL) are taken back by the first bookie too, not only their
    parents: a cookie can no longer be rewritten by a client, a planted registration is neither
    readable nor listed, and the bookie names each in one warning line."""
    uri = zookeeper_server.uri(zookeeper_server.chroot("/regacl-children"))
    root = "/" + uri.split("/", 3)[3]
    cluster = load_zk_security(True, creds["cluster"])
    open_metadata(uri, create=True, zk_security=cluster).close()
    client = kazoo(zookeeper_server, creds["cluster"])
    try:
        planted = f"{root}/available/127.0.0.1:1"
        cookie = f"{root}/cookies/127.0.0.1:2"
        client.create(planted, b'{"host": "10.6.6.6", "add_port": 3181}', acl=cluster.acl)
        client.create(cookie, b'{"bookie_id": "127.0.0.1:2"}', acl=cluster.acl)
        conf = {"zkEnableSecurity": "true", "zkDigestAuthFile": creds["cluster"],
                "zkBookieDigestAuthFile": creds["bookies"], "flushInterval": 50}
        with LocalBookies(1, metadata_uri=uri, conf=conf) as ens:
            log = ens.log(0)
            for node in (planted, cookie):
                assert sum(node in line and "not written by the bookies' principal" in line
                           and "warning" in line for line in log.splitlines()) >= 1, log[-3000:]
            with pytest.raises(kz.NoAuthError):
                client.set(cookie, b'{"bookie_id": "rewritten"}')
            with pytest.raises(kz.NoAuthError):
                client.get(planted)
            with pytest.raises(kz.NoAuthError):
                client.delete(planted)
            with open_metadata(uri, zk_security=cluster) as store:
                assert store.list_bookies() == ens.bookies  # the planted one is not listed
            keys = {"zkEnableSecurity": True, "zkDigestAuthFile": creds["cluster"]}
            with BookKeeper(uri, keys, allowEmptyPassword=True) as bk:
                lh = bk.create_ledger(1, 1, 1, password=b"")
                lh.add_entry(b"on the bookie that registered itself")
                lh.close()
    finally:
        client.stop()
        client.close()
