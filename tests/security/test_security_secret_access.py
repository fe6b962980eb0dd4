"""The recovery secret is readable by bookies only (issue 22, finding 1).

- On a real ZooKeeper with ``zkEnableSecurity`` (the cluster's digest, which clients hold too)
  and ``zkBookieDigestAuthFile`` (the bookies' own): the secret lives under ``<root>/PRIVATE``;
  a holder of the cluster's digest reads no node that holds it, cannot list or replace it, and
  the bookies' principal reads it; the bookie accepts the credential made from it.
- On an open ZooKeeper without the bookies' principal: no secret is made at all (nothing any
  client could read), the bookie says so once at start, and autorecovery is left its
  passwords.
- On the embedded store: the secret is a 0600 file beside the store, and the client's record
  API refuses every path outside ``/records`` and ``/logs`` (the secret, cookies, ledgers).
"""

from __future__ import annotations

import os
import stat

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from bookie.client import BookKeeper
from bookie.client.errors import InvalidArgumentError, NoSuchRecordError
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.recovery_secret import credential, recovery_secret
from bookie.metadata.zk_acl import load_zk_security, with_bookie_credentials
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status

NO_SECRET_LINE = "no recovery secret: the metadata store has no place only bookies read"


def _cred(path, text) -> str:
    path.write_text(text)
    os.chmod(path, 0o600)
    return str(path)


def _kazoo(server, auth: str | None) -> KazooClient:
    c = KazooClient(hosts=server.hosts, auth_data=[("digest", auth)] if auth else None, timeout=10)
    c.start(timeout=10)
    return c


def _walk(client, root: str) -> dict[str, bytes | None]:
    """Every node under ``root`` -> its data, None where the client may not read it."""
    out, todo = {}, [root]
    while todo:
        path = todo.pop()
        try:
            out[path] = client.get(path)[0]
            todo += [f"{path}/{k}" for k in client.get_children(path)]
        except NoAuthError:
            out[path] = None
    return out


def test_on_zookeeper_only_the_bookies_principal_reads_the_secret(zookeeper_server, tmp_path):
    cluster = _cred(tmp_path / "cluster", "cluster:shared-with-clients\n")
    bookies = _cred(tmp_path / "bookies", "bookies:for-bookies-only\n")
    uri = zookeeper_server.uri(zookeeper_server.chroot("/private"))
    conf = {"zkEnableSecurity": "true", "zkDigestAuthFile": cluster,
            "zkBookieDigestAuthFile": bookies, "flushInterval": 50}
    with LocalBookies(1, metadata_uri=uri, conf=conf) as ens:
        root = "/" + uri.split("/", 3)[3]
        bookie_side = with_bookie_credentials(load_zk_security(True, cluster), bookies)
        with open_metadata(uri, zk_security=bookie_side) as store:
            secret = recovery_secret(store, create=False)
        assert secret is not None and len(secret) == 32
        client = _kazoo(zookeeper_server, "cluster:shared-with-clients")
        try:
            seen = _walk(client, root)
            assert seen[root + "/PRIVATE"] is None  # not even listed
            assert secret not in [d for d in seen.values() if d is not None]
            with pytest.raises(NoAuthError):
                client.get(root + "/PRIVATE/RECOVERYSECRET")
            with pytest.raises(NoAuthError):
                client.delete(root + "/PRIVATE/RECOVERYSECRET")
        finally:
            client.stop()
            client.close()
        # the client API of the cluster's principal refuses the paths outright
        with BookKeeper(uri, {"zkEnableSecurity": True, "zkDigestAuthFile": cluster}) as bk:
            for path in ("/PRIVATE/RECOVERYSECRET", "/RECOVERYSECRET", "/cookies", "/available"):
                with pytest.raises(InvalidArgumentError, match="not a record path"):
                    bk.read_record(path)
        # the bookie takes the credential made from the secret (autorecovery's fence)
        with open_metadata(uri, zk_security=bookie_side) as store:
            lid, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            assert c.add(lid, [make_entry(lid, 0, b"e0")], b"w" * 20) == Status.OK
            status = c.request(c.read_sock, Op.READ_LAC, lid,
                               int(Flag.FENCE | Flag.RECOVERY_CREDENTIAL), [credential(secret, lid)])[0]
            assert status == Status.OK
            assert c.add(lid, [make_entry(lid, 1, b"e1", lac=0)], b"w" * 20) == Status.FENCED


def test_on_open_zookeeper_without_the_bookies_principal_there_is_no_secret(zookeeper_server, tmp_path):
    uri = zookeeper_server.uri(zookeeper_server.chroot("/nosecret"))
    with LocalBookies(1, metadata_uri=uri, base_dir=str(tmp_path / "e")) as ens:
        root = "/" + uri.split("/", 3)[3]
        anyone = _kazoo(zookeeper_server, None)
        try:
            seen = _walk(anyone, root)
            assert not [p for p, d in seen.items() if d is not None and len(d) == 32], seen
            assert root + "/RECOVERYSECRET" not in seen and root + "/PRIVATE" not in seen
        finally:
            anyone.stop()
            anyone.close()
        assert ens.log(0).count(NO_SECRET_LINE) == 1, ens.log(0)[-2000:]


def test_on_the_embedded_store_the_secret_is_a_private_file_no_record_reaches(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf={"flushInterval": 50}) as ens:
        store_dir = ens.metadata_uri[len("lmdb://"):]
        path = os.path.join(store_dir, "RECOVERYSECRET.private")
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
        with open(path, "rb") as f:
            secret = f.read()
        with BookKeeper(ens.metadata_uri) as bk:
            for path in ("/RECOVERYSECRET", "/cookies/" + ens.bookies[0], "/available",
                         "/underreplication", "/", "/logs/../RECOVERYSECRET", "recordsX"):
                with pytest.raises(InvalidArgumentError, match="not a record path"):
                    bk.read_record(path)
            with pytest.raises(InvalidArgumentError):
                bk.list_records("/")
            with pytest.raises(InvalidArgumentError):
                bk.create_record("/cookies/evil", b"x")
            bk.create_record("/records/app/state", b"mine")  # the user's own subtree works
            assert bk.read_record("/records/app/state")[0] == b"mine"
            assert bk.list_records("/records/app") == ["state"]
            with pytest.raises(NoSuchRecordError):
                bk.read_record("/records/none")
        with open_metadata(ens.metadata_uri) as store:
            assert store.exists("/RECOVERYSECRET") is None  # not an ordinary node any more
            assert recovery_secret(store, create=False) == secret
