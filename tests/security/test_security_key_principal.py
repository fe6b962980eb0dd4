"""Under CURVE the principal is the key, not its file's name (issue 22, finding 3).

Real bookie processes and a real enrolment directory:

- ``reader/app.key`` of one key and ``admin/app.key`` of another: the bookie refuses to start,
  one line naming the duplicate, exit status 2 (before, the reader's key got admin rights);
- a key whose file is removed loses its open connections even when another key is enrolled
  under the same name meanwhile (a rotation): before, the connection kept the name's rights;
- the same duplicate made while the bookie runs is left out at the reload, with a warning.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
import zmq
import zmq.auth

from bookie.client.auth import ClientCurve
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookieError, LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status
from bookie.workers.auth import RELOAD_INTERVAL_S, AuthError, load_enrolment

PASSWORD = b"key-principal-password"
SETTLE_S = RELOAD_INTERVAL_S + 0.5


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keyprincipal")
    made = {n: zmq.auth.create_certificates(str(root), n) for n in ("bookie", "app1", "app2", "boss")}
    made["root"] = root
    return made


def enrol(root, layout: dict[str, str], keys) -> str:
    """A fresh enrolment directory: {"reader/app": "app1", ...} (file -> whose public key)."""
    d = root / f"clients-{time.monotonic_ns()}"
    for role in ("reader", "writer", "admin"):
        os.makedirs(d / role)
    for path, who in layout.items():
        shutil.copy(keys[who][0], d / f"{path}.key")
    return str(d)


def connect(ens, keys, name, timeout_s=5.0) -> RawBookieClient:
    return RawBookieClient(ens.bookies[0], timeout_s=timeout_s, ctx=zmq.Context(),
                           curve=ClientCurve(keys[name][1], keys["bookie"][0]))


def close(c: RawBookieClient) -> None:
    c.close()
    c.ctx.term()


def test_one_name_in_two_roles_refuses_the_start_in_one_line(keys, tmp_path):
    clients = enrol(keys["root"], {"reader/app": "app1", "admin/app": "app2"}, keys)
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": clients}
    with pytest.raises(LocalBookieError) as refused:
        with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf, start_timeout_s=30):
            pass
    text = str(refused.value)
    assert "exited with status 2" in text, text[-2000:]
    assert "the name 'app' is enrolled in reader/ and admin/" in text, text[-2000:]
    assert "Traceback" not in text
    with pytest.raises(AuthError, match="one key is enrolled as reader/a.key and writer/b.key"):
        load_enrolment(enrol(keys["root"], {"reader/a": "app1", "writer/b": "app1"}, keys))


def test_a_removed_key_is_cut_though_another_key_now_has_its_name(keys, tmp_path):
    clients = enrol(keys["root"], {"writer/app": "app1"}, keys)
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": clients,
            "flushInterval": 50}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        with open_metadata(ens.metadata_uri) as store:  # a ledger the store made (no key check)
            ledger, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        old = connect(ens, keys, "app1")
        try:
            assert old.add(ledger, [make_entry(ledger, 0, b"e0")], PASSWORD) == Status.OK
            # rotation: app1's key goes, app2's key comes in under the same file name
            tmp = os.path.join(clients, "app.key.tmp")
            shutil.copy(keys["app2"][0], tmp)
            os.replace(tmp, os.path.join(clients, "writer", "app.key"))
            time.sleep(SETTLE_S)
            assert old.add(ledger, [make_entry(ledger, 1, b"e1", lac=0)], PASSWORD) \
                == Status.UNAUTHORIZED
            assert old.read(ledger, 0)[0] == Status.UNAUTHORIZED
            new = connect(ens, keys, "app2")
            try:
                assert new.add(ledger, [make_entry(ledger, 1, b"e1", lac=0)], PASSWORD) == Status.OK
            finally:
                close(new)
        finally:
            close(old)

        # a duplicate made while running: both files are left out, with a warning
        shutil.copy(keys["boss"][0], os.path.join(clients, "admin", "app.key"))
        time.sleep(SETTLE_S)
        for who in ("app2", "boss"):
            c = connect(ens, keys, who, timeout_s=0.8)
            try:
                with pytest.raises(BookieTimeout):
                    c.info()
            finally:
                close(c)
        assert "the name 'app' is enrolled in writer/ and admin/" in ens.log(0)


def test_a_reader_key_never_gets_the_admin_rights_of_a_namesake(keys, tmp_path):
    """The reload rule as the running bookie applies it: reader/app.key (app1) is enrolled, then
    admin/app.key (app2) appears; app1's open connection stays a reader at most."""
    clients = enrol(keys["root"], {"reader/app": "app1"}, keys)
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": clients}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        reader = connect(ens, keys, "app1")
        try:
            reader.info()
            shutil.copy(keys["app2"][0], os.path.join(clients, "admin", "app.key"))
            time.sleep(SETTLE_S)
            status = reader.add(7402, [make_entry(7402, 0, b"x")], PASSWORD)
            assert status == Status.UNAUTHORIZED
            assert reader.fence(7402, PASSWORD) == Status.UNAUTHORIZED
        finally:
            close(reader)
