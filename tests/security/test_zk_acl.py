"""The metadata store protected: ZooKeeper digest authentication and ACLs (zkEnableSecurity,
zkDigestAuthFile), against the session's real ZooKeeper and a real bookie; and the embedded
store's files the bookie user's alone."""

import os
import subprocess
import sys
import time

import pytest
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from bookie.client import BookKeeper, ClientConfig
from bookie.client.errors import InvalidArgumentError, MetadataStoreError
from bookie.metadata import AccessDeniedError, load_zk_security, open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.metadata.zk_acl import root_acl_problem
from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError
from bookie.workers.config import BookieConfig, ConfigError


def _cred(path, text, mode=0o600) -> str:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return str(path)


@pytest.fixture(scope="module")
def creds(tmp_path_factory):
    d = tmp_path_factory.mktemp("zkcreds")
    return {"alice": _cred(d / "alice", "alice:correct-horse\n"),
            "mallory": _cred(d / "mallory", "mallory:battery-staple\n"),
            "dir": d}


@pytest.fixture(scope="module")
def secure(zookeeper_server, creds):
    """One bookie with zkEnableSecurity on, registered in a protected ZooKeeper root."""
    uri = zookeeper_server.uri(zookeeper_server.chroot("/zkacl"))
    conf = {"zkEnableSecurity": "true", "zkDigestAuthFile": creds["alice"], "flushInterval": 50,
            "autoRecoveryDaemonEnabled": "true"}  # its election nodes are checked too
    with LocalBookies(1, metadata_uri=uri, conf=conf) as ens:
        yield ens


def _kazoo(server, cred_file=None) -> KazooClient:
    auth = None
    if cred_file:
        with open(cred_file) as f:
            auth = [("digest", f.read().strip())]
    c = KazooClient(hosts=server.hosts, auth_data=auth, timeout=10)
    c.start(timeout=10)
    return c


def _root(ens) -> str:
    return "/" + ens.metadata_uri.split("/", 3)[3]


def test_a_bookie_and_a_client_with_the_credentials_work_and_every_node_is_theirs_alone(
        secure, creds, zookeeper_server):
    keys = {"zkEnableSecurity": True, "zkDigestAuthFile": creds["alice"]}
    with BookKeeper(secure.metadata_uri, keys, allowEmptyPassword=True) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"")
        lh.add_entry(b"protected")
        lh.close()
        assert [bytes(e.data) for e in bk.open_ledger(lh.ledger_id, password=b"")
                .read_entries(0, 0)] == [b"protected"]
        bk.delete_ledger(lh.ledger_id)
    sec = load_zk_security(True, creds["alice"])
    with open_metadata(secure.metadata_uri, zk_security=sec) as store:
        assert store.list_bookies() == secure.bookies
        store.create("/recovery-secret", b"s")  # the generic API: protected as well
        UnderReplication(store).mark(7, ["127.0.0.1:1"])
    owner = _kazoo(zookeeper_server, creds["alice"])
    try:
        election = _root(secure) + "/underreplication/auditorelection"
        deadline = time.monotonic() + 15
        while not (owner.exists(election) and owner.get_children(election)):
            assert time.monotonic() < deadline, "the autorecovery worker never voted"
            time.sleep(0.1)
        todo, seen = [_root(secure)], 0
        while todo:
            path = todo.pop()
            acls, _ = owner.get_acls(path)
            assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == \
                [("digest", sec.principal.split(":", 1)[1], 31)], path
            todo += [f"{path}/{k}" for k in owner.get_children(path)]
            seen += 1
        assert seen > 8  # root, LAYOUT, idgen, available/..., cookies/..., underreplication/...
    finally:
        owner.stop()
        owner.close()


@pytest.mark.parametrize("who", [None, "mallory"])
def test_others_can_neither_read_nor_change_ledgers_nor_registrations(
        secure, creds, zookeeper_server, who):
    sec = load_zk_security(True, creds["alice"])
    with open_metadata(secure.metadata_uri, zk_security=sec) as store:
        from bookie.metadata import LedgerMetadata
        ledger_id, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, secure.bookies)]))
        ledger = store._ledger_path(ledger_id)
        registration = f"{_root(secure)}/available/{secure.bookies[0]}"
        assert store.client.exists(registration) is not None
        intruder = _kazoo(zookeeper_server, creds[who] if who else None)
        try:
            for node in (ledger, registration, _root(secure)):
                calls = [("get", lambda: intruder.get(node)),
                         ("children", lambda: intruder.get_children(node)),
                         ("set", lambda: intruder.set(node, b"x")),
                         ("create under", lambda: intruder.create(node + "/x")),
                         ("set acl", lambda: intruder.set_acls(node, OPEN_ACL_UNSAFE))]
                if node != _root(secure):  # deleting is the parent's permission (docs/security.md)
                    calls.append(("delete", lambda: intruder.delete(node)))
                for name, call in calls:
                    with pytest.raises(kz.NoAuthError):
                        call()
                        pytest.fail(f"{who or 'anonymous'} could {name} {node}")
        finally:
            intruder.stop()
            intruder.close()
        assert store.read_ledger(ledger_id)[1] == 0
        store.remove_ledger(ledger_id)


def test_clients_without_the_right_settings_get_one_line_naming_the_key(secure, creds):
    with pytest.raises(MetadataStoreError, match=r"NoAuth\): set zkDigestAuthFile"):
        BookKeeper(secure.metadata_uri)
    with pytest.raises(MetadataStoreError, match=r"NoAuth\) for the user 'mallory' of zkDigestAuthFile"):
        BookKeeper(secure.metadata_uri, zkEnableSecurity=True, zkDigestAuthFile=creds["mallory"])
    with pytest.raises(MetadataStoreError, match=r"zkEnableSecurity is false"):
        BookKeeper(secure.metadata_uri, zkDigestAuthFile=creds["alice"])


def _bookie(*args):
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True, text=True,
                          timeout=60)


def test_the_shell_says_what_is_missing_in_one_line_and_works_with_the_credentials(secure, creds):
    r = _bookie("shell", "listbookies", "--metadata", secure.metadata_uri, "--timeout-s", "5")
    assert r.returncode == 2, r
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "ZooKeeper refused access to" in r.stderr and "set zkDigestAuthFile" in r.stderr
    r = _bookie("shell", "listbookies", "--metadata", secure.metadata_uri,
                "--zk-digest-auth-file", creds["alice"])
    assert r.returncode == 0 and secure.bookies[0] in r.stdout, r


def test_a_bookie_without_credentials_refuses_to_start(secure, tmp_path):
    ens = LocalBookies(1, metadata_uri=secure.metadata_uri, base_dir=str(tmp_path),
                       start_timeout_s=30)
    try:  # start() alone: the bookie process itself meets the protected store, not LocalBookies
        with pytest.raises(LocalBookieError, match=r"(?s)exited with status 2.*"
                                                   r"NoAuth\): set zkDigestAuthFile"):
            ens.start(0)
        assert "Traceback" not in ens.log(0)
    finally:
        ens.close()


def test_an_open_tree_is_refused_with_security_on_until_zkprotect(zookeeper_server, creds):
    uri = zookeeper_server.uri(zookeeper_server.chroot("/zkacl-open"))
    open_metadata(uri, create=True).close()  # formatted before security was turned on
    sec = load_zk_security(True, creds["alice"])
    with pytest.raises(AccessDeniedError, match=r"not protected.*bookie shell zkprotect"):
        open_metadata(uri, zk_security=sec)
    r = _bookie("shell", "zkprotect", "--metadata", uri, "--zk-digest-auth-file", creds["alice"])
    assert r.returncode == 0 and "nodes protected" in r.stdout, r
    open_metadata(uri, zk_security=sec).close()
    with pytest.raises(AccessDeniedError, match="NoAuth"):
        open_metadata(uri)
    r = _bookie("shell", "zkprotect", "--metadata", uri)
    assert r.returncode == 2 and "needs the cluster's credentials" in r.stderr, r


def test_the_credential_file_is_refused_when_open_or_malformed(creds):
    d = creds["dir"]
    cases = {
        _cred(d / "open", "alice:pw\n", 0o644): r"open to group or other \(mode 0644\).*chmod 600",
        _cred(d / "nocolon", "alicepw\n"): "must hold one line user:password",
        _cred(d / "two", "alice:pw\nbob:pw\n"): "must hold one line",
        _cred(d / "empty", ""): "must hold one line",
        str(d / "absent"): "cannot read",
    }
    for path, why in cases.items():
        with pytest.raises(AccessDeniedError, match=why) as e:
            load_zk_security(True, path)
        assert "\n" not in str(e.value) and "pw" not in str(e.value).replace(path, "")
        with pytest.raises(ConfigError, match="^zkDigestAuthFile: "):
            BookieConfig.from_mapping({"ledgerDirectories": "/tmp", "zkDigestAuthFile": path},
                                      check_dirs=False)
        with pytest.raises(InvalidArgumentError, match="zkDigestAuthFile"):
            ClientConfig.build(zkDigestAuthFile=path)
    with pytest.raises(ConfigError, match="zkEnableSecurity=true needs zkDigestAuthFile"):
        BookieConfig.from_mapping({"ledgerDirectories": "/tmp", "zkEnableSecurity": "true"},
                                  check_dirs=False)
    assert ClientConfig.build(zkEnableSecurity="true", zkDigestAuthFile=creds["alice"]) \
        .zk_security().enabled  # Spark options arrive as strings
    assert "correct-horse" not in repr(load_zk_security(True, creds["alice"]))


def test_root_acl_judgement():
    from bookie.metadata.zk_acl import ZkSecurity
    alice = ZkSecurity(enabled=True, user="alice", password="p", source="f")
    assert root_acl_problem("/r", alice.acl, alice) is None
    assert "not protected" in root_acl_problem("/r", OPEN_ACL_UNSAFE, alice)
    assert root_acl_problem("/r", OPEN_ACL_UNSAFE, None) is None
    assert "set zkDigestAuthFile" in root_acl_problem("/r", alice.acl, None)
    bob = ZkSecurity(enabled=True, user="bob", password="p", source="f")
    assert "not for the user 'bob'" in root_acl_problem("/r", alice.acl, bob)


def test_the_embedded_store_is_the_bookie_users_alone(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "metadata"
        with open_metadata(f"lmdb://{path}", create=True) as store:
            store.create("/x", b"secret")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o700
    files = os.listdir(path)
    assert files
    for name in files:
        assert os.stat(path / name).st_mode & 0o077 == 0, name


def test_after_session_expiry_the_registration_comes_back_protected(zookeeper_server, creds):
    from bookie.testing.zookeeper import expire_session
    sec = load_zk_security(True, creds["alice"])
    uri = zookeeper_server.uri(zookeeper_server.chroot("/zkacl-expiry"))
    with open_metadata(uri, timeout_s=5.0, create=True, zk_security=sec) as store:
        store.register_bookie("127.0.0.1:3181", info={"v": 1})
        path = store.root + "/available/127.0.0.1:3181"
        old = store.session_id()
        expire_session(store.client)
        deadline = time.monotonic() + 10
        while True:  # re-registered by the new session: kazoo re-sent the credentials
            stat = store.client.exists(path)
            if stat is not None and stat.ephemeralOwner == store.session_id() != old:
                break
            assert time.monotonic() < deadline, "the registration did not come back"
            time.sleep(0.05)
        acls, _ = store.client.get_acls(path)
        assert acls == sec.acl
        assert store.list_bookies() == ["127.0.0.1:3181"]
