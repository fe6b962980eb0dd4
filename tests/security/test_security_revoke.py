"""Enrolment changes without a restart (workers/auth.py ``Enrolment``): a key file removed from
``curveClientKeysDirectory`` is refused at its next handshake and on every further request of the
connections it already has open; a key file added is admitted; a key moved between roles gets the
new role's rights.  Real bookie processes, the real directory, within ``RELOAD_INTERVAL_S``."""

import os
import shutil
import time

import pytest
import zmq
import zmq.auth

from bookie.client.auth import ClientCurve
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from bookie.workers.auth import RELOAD_INTERVAL_S, Enrolment, Gate

PASSWORD = b"revoke-test-password"
SETTLE_S = RELOAD_INTERVAL_S + 0.3  # the documented bound, and a margin


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("revoke")
    made = {n: zmq.auth.create_certificates(str(root), n) for n in ("bookie", "alice", "bob")}
    made["clients"] = str(root / "clients")
    made["aside"] = str(root / "aside")
    for d in ("clients/writer", "clients/reader", "aside"):
        os.makedirs(root / d)
    shutil.copy(made["alice"][0], root / "clients" / "writer" / "alice.key")
    return made


def connect(ens, keys, name, timeout_s=5.0) -> RawBookieClient:
    return RawBookieClient(ens.bookies[0], timeout_s=timeout_s, ctx=zmq.Context(),
                           curve=ClientCurve(keys[name][1], keys["bookie"][0]))


def close(c: RawBookieClient) -> None:
    c.close()
    c.ctx.term()


def refused_at_handshake(ens, keys, name) -> bool:
    c = connect(ens, keys, name, timeout_s=0.8)
    try:
        c.info()
        return False
    except BookieTimeout:
        return True
    finally:
        close(c)


def test_keys_removed_added_and_moved_take_effect_without_a_restart(ens, keys):
    """alice (writer) is revoked while connected, bob is enrolled as a reader, then moved to
    writer/ while connected, and alice comes back: each within the reload interval."""
    ledger = 7301
    create_ledgers(ens.metadata_uri, [ledger], PASSWORD)  # a bookie stores only ids its store knows
    clients, aside = keys["clients"], keys["aside"]
    pid = ens.procs[0].pid
    alice = connect(ens, keys, "alice")
    bob = None
    try:
        assert alice.add(ledger, [make_entry(ledger, 0, b"before")], PASSWORD) == Status.OK
        assert alice.read(ledger, 0)[0] == Status.OK
        assert refused_at_handshake(ens, keys, "bob")

        shutil.move(os.path.join(clients, "writer", "alice.key"), aside)  # revoked
        shutil.copy(keys["bob"][0], os.path.join(clients, "reader", "bob.key"))  # enrolled
        time.sleep(SETTLE_S)
        # alice's connection stays up, but every request on it is refused, on both sockets
        assert alice.add(ledger, [make_entry(ledger, 1, b"after", lac=0)], PASSWORD) \
            == Status.UNAUTHORIZED
        assert alice.read(ledger, 0)[0] == Status.UNAUTHORIZED
        assert alice.read_lac(ledger)[0] == Status.UNAUTHORIZED
        assert refused_at_handshake(ens, keys, "alice")
        bob = connect(ens, keys, "bob")
        assert bob.read(ledger, 0)[0] == Status.OK
        assert bob.add(ledger, [make_entry(ledger, 1, b"bob", lac=0)], PASSWORD) \
            == Status.UNAUTHORIZED  # a reader
        log = ens.log(0)
        assert "removed=alice" in log and "added=bob" in log

        os.rename(os.path.join(clients, "reader", "bob.key"),
                  os.path.join(clients, "writer", "bob.key"))  # bob's open connection: writer
        shutil.move(os.path.join(aside, "alice.key"), os.path.join(clients, "writer"))
        time.sleep(SETTLE_S)
        assert bob.add(ledger, [make_entry(ledger, 1, b"bob", lac=0)], PASSWORD) == Status.OK
        assert alice.read(ledger, 1)[0] == Status.OK
    finally:
        alice and close(alice)
        bob and close(bob)
        for role in ("reader", "writer"):
            path = os.path.join(clients, role, "bob.key")
            if os.path.exists(path):
                os.unlink(path)
    assert ens.procs[0].pid == pid  # the same supervisor all along: nothing restarted


# -- the reload rule, with a clock of our own ------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_directory_is_looked_at_no_more_than_every_interval(tmp_path):
    pub, _ = zmq.auth.create_certificates(str(tmp_path), "carol")
    os.makedirs(tmp_path / "keys" / "writer")
    shutil.copy(pub, tmp_path / "keys" / "writer" / "carol.key")
    carol = zmq.auth.load_certificate(pub)[0].decode()  # the principal is the key
    clock = Clock()
    logged = []
    enrolment = Enrolment(str(tmp_path / "keys"), interval_s=1.0, clock=clock,
                          log=lambda event, **f: logged.append((event, f)))
    gate = Gate(enrolment)
    assert gate.roles == {carol: "writer"}
    os.unlink(tmp_path / "keys" / "writer" / "carol.key")
    clock.now += 0.5
    assert gate.roles == {carol: "writer"}  # not looked at yet
    clock.now += 0.5
    assert gate.roles == {}
    assert logged[-1][0] == "client keys reloaded" and logged[-1][1]["removed"] == "carol"
    (tmp_path / "keys" / "admin").mkdir()
    (tmp_path / "keys" / "admin" / "broken.key").write_text("not a key\n")
    shutil.copy(pub, tmp_path / "keys" / "admin" / "carol.key")
    clock.now += 1.0
    assert gate.roles == {carol: "admin"}  # the unreadable file is left out, with a warning
    assert "enrolled client key left out" in [event for event, _ in logged]
    reloads = enrolment.reloads
    clock.now += 5.0
    gate.roles
    assert enrolment.reloads == reloads  # nothing changed: nothing re-read
