"""CurveZMQ on the client sockets, against real bookie processes and the real client: enrolled
keys are served by role, every other connection gets no answer at all, and the bytes on the
wire hold neither the payload nor the master key."""

import os
import socket
import threading

import pytest
import zmq
import zmq.auth
import zmq.utils.z85

from bookie.client import BookKeeper
from bookie.client.auth import ClientCurve
from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status

PAYLOAD = b"curve-secret-payload-7f3a9c"
PASSWORD = b"curve-secret-password-51d2"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A bookie keypair, enrolled writer/reader/admin clients, and a client nobody enrolled."""
    root = tmp_path_factory.mktemp("curve")
    made = {}
    for name in ("bookie", "alice", "rita", "adam", "mallory"):
        made[name] = zmq.auth.create_certificates(str(root), name)  # (public, secret) paths
    enrol = root / "clients"
    for role, name in (("writer", "alice"), ("reader", "rita"), ("admin", "adam")):
        os.makedirs(enrol / role)
        with open(made[name][0]) as src, open(enrol / role / f"{name}.key", "w") as dst:
            dst.write(src.read())
    made["clients"] = str(enrol)
    return made


def curve(keys, name) -> ClientCurve:
    return ClientCurve(keys[name][1], keys["bookie"][0])


def raw(ens, keys, name, timeout_s=10.0, port_of=None):
    bookie = ens.bookies[0] if port_of is None else f"127.0.0.1:{port_of}"
    return RawBookieClient(bookie, timeout_s=timeout_s, ctx=zmq.Context(),
                           curve=curve(keys, name) if name else None)


def test_an_enrolled_writer_writes_and_reads_through_the_client(ens, keys):
    with BookKeeper(ens.metadata_uri, curveSecretKeyFile=keys["alice"][1],
                    curveServerKeys=keys["bookie"][0], addEntryTimeout=5) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(5):
            lh.add_entry(PAYLOAD + b"%d" % i)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)
        got = [e.data for e in rh.read_entries(0, 4)]
    assert got == [PAYLOAD + b"%d" % i for i in range(5)]


@pytest.mark.parametrize("who", [None, "mallory"], ids=["no-key", "unknown-key"])
def test_without_an_enrolled_key_no_op_gets_any_answer(ens, keys, who):
    c = raw(ens, keys, who, timeout_s=0.6)
    for sock in (c.add_sock, c.read_sock):
        sock.setsockopt(zmq.SNDTIMEO, 600)  # no handshake completes: the request is not even taken
    try:
        for op in (lambda: c.info(), lambda: c.add(7, [make_entry(7, 0, b"x")], PASSWORD),
                   lambda: c.read(7, 0), lambda: c.read_lac(7), lambda: c.fence(7, PASSWORD),
                   lambda: c.write_lac(7, 0, PASSWORD)):
            with pytest.raises((BookieTimeout, zmq.Again)):
                op()
    finally:
        c.close()
        c.ctx.term()
    if who:  # the bookie's ZAP handler turned the key away (not a failed key exchange)
        assert "client key not enrolled" in ens.log(0)
    # and the enrolled writer still is served
    with raw(ens, keys, "alice") as ok:
        assert ok.info()["bookie_id"] == ens.bookies[0]


def test_a_reader_reads_but_cannot_add_fence_or_write_lac(ens, keys):
    ledger = 9101
    create_ledgers(ens.metadata_uri, [ledger], PASSWORD)  # a bookie stores only ids its store knows
    with raw(ens, keys, "alice") as w:
        assert w.add(ledger, [make_entry(ledger, i, b"e%d" % i, lac=i - 1) for i in range(3)],
                     PASSWORD) == Status.OK
    with raw(ens, keys, "rita") as r:
        assert r.add(ledger, [make_entry(ledger, 3, b"e3", lac=2)], PASSWORD) == Status.UNAUTHORIZED
        assert r.fence(ledger, PASSWORD) == Status.UNAUTHORIZED
        assert r.read(ledger, 0, 1, fence_key=PASSWORD)[0] == Status.UNAUTHORIZED
        assert r.write_lac(ledger, 2, PASSWORD) == Status.UNAUTHORIZED
        status, entries = r.read(ledger, 0, 10)
        assert status == Status.OK and len(entries) == 3
        assert r.read_lac(ledger)[0] == Status.OK
    with raw(ens, keys, "alice") as w:  # nothing the reader asked for happened
        assert w.add(ledger, [make_entry(ledger, 3, b"e3", lac=2)], PASSWORD) == Status.OK
    with raw(ens, keys, "adam") as a:  # admin may fence
        assert a.fence(ledger, PASSWORD) == Status.OK


class Recorder:
    """A TCP forwarder on 127.0.0.1 that keeps every byte passing it, both ways."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.listener.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while data := src.recv(65536):
                with self.lock:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_a_capture_of_a_legitimate_write_holds_neither_payload_nor_key(ens, keys):
    port = int(ens.bookies[0].rsplit(":", 1)[1])
    add, read = Recorder(port), Recorder(port + 1)
    ledger = 9202
    create_ledgers(ens.metadata_uri, [ledger], PASSWORD)
    body = PAYLOAD * 40
    c = RawBookieClient(ens.bookies[0], ctx=zmq.Context(), curve=curve(keys, "alice"))
    try:
        # point each of the client's sockets at its recorder instead of the bookie
        for sock, rec, real in ((c.add_sock, add, port), (c.read_sock, read, port + 1)):
            sock.disconnect(f"tcp://127.0.0.1:{real}")
            sock.connect(f"tcp://127.0.0.1:{rec.port}")
        assert c.add(ledger, [make_entry(ledger, 0, body)], PASSWORD) == Status.OK
        assert c.write_lac(ledger, 0, PASSWORD) == Status.OK
        status, entries = c.read(ledger, 0, 1)
        assert status == Status.OK and body in entries[0]
    finally:
        c.close()
        c.ctx.term()
    seen = bytes(add.seen) + bytes(read.seen)
    assert len(seen) > len(body)  # the traffic did pass the recorders
    _, alice_secret = zmq.auth.load_certificate(keys["alice"][1])
    for secret in (PAYLOAD, PASSWORD, alice_secret, zmq.utils.z85.decode(alice_secret)):
        assert secret not in seen


def test_curve_configured_but_unusable_refuses_to_start(tmp_path, keys):
    from bookie.appliance.startchecks import StartRefused, check_client_security
    from bookie.workers.config import BookieConfig

    def conf(**more):
        return BookieConfig.from_mapping({"listeningInterface": "0.0.0.0", **more}, check_dirs=False)

    level, line = check_client_security(conf(curveSecretKeyFile=keys["bookie"][1],
                                             curveClientKeysDirectory=keys["clients"]))
    assert level == "info" and "3 client keys enrolled (1 reader, 1 writer, 1 admin)" in line
    with pytest.raises(StartRefused, match="curveClientKeysDirectory"):
        check_client_security(conf(curveSecretKeyFile=keys["bookie"][1]))
    with pytest.raises(StartRefused, match="no secret key"):  # the public half given by mistake
        check_client_security(conf(curveSecretKeyFile=keys["bookie"][0],
                                   curveClientKeysDirectory=keys["clients"]))
    level, line = check_client_security(conf(curveSecretKeyFile=keys["bookie"][1],
                                             curveClientKeysDirectory=str(tmp_path)))
    assert level == "warning" and "enrols no key" in line


def test_genkey_writes_a_pair_with_a_private_secret_and_never_overwrites_unasked(tmp_path):
    import subprocess
    import sys

    def genkey(*args):
        return subprocess.run([sys.executable, "-m", "bookie", "shell", "genkey", *args],
                              capture_output=True, text=True, timeout=60)

    r = genkey("alice", "--dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    public, secret = tmp_path / "alice.key", tmp_path / "alice.key_secret"
    assert os.stat(secret).st_mode & 0o777 == 0o600
    assert os.stat(public).st_mode & 0o777 == 0o644
    pub, sec = zmq.auth.load_certificate(str(secret))
    assert zmq.auth.load_certificate(str(public)) == (pub, None) and sec
    before = secret.read_bytes()
    r = genkey("alice", "--dir", str(tmp_path))
    assert r.returncode == 2 and "exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert secret.read_bytes() == before
    assert genkey("alice", "--dir", str(tmp_path), "--force").returncode == 0
    assert secret.read_bytes() != before
    r = genkey("../evil", "--dir", str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_a_loopback_bookie_without_curve_says_so_at_start(secure_bookie):
    assert "no client key enrolled" in secure_bookie.log(0)


@pytest.mark.security
def test_autorecovery_heals_with_the_bookies_own_keys(keys, tmp_path):
    """Opt-in (-m security; ten seconds here): four CURVE bookies sharing one keypair, enrolled as admin at
    each other; a bookie killed for good is replaced in every ledger by autorecovery."""
    import shutil
    import time

    enrol = tmp_path / "clients"
    shutil.copytree(keys["clients"], enrol)
    shutil.copy(keys["bookie"][0], enrol / "admin" / "bookie.key")
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": str(enrol),
            "curveServerKeys": keys["bookie"][0], "autoRecoveryDaemonEnabled": "true",
            "lostBookieRecoveryDelay": "2", "openLedgerRereplicationGracePeriod": "1000",
            "gcWaitTime": "600000", "zkTimeout": "4000",
            "autoRecoveryLedgerPasswords": PASSWORD.decode()}
    with LocalBookies(4, conf=conf) as lb, \
            BookKeeper(lb.metadata_uri, curveSecretKeyFile=keys["alice"][1],
                       curveServerKeys=keys["bookie"][0]) as bk:
        ids = []
        for n in range(3):
            h = bk.create_ledger(3, 2, 2, password=PASSWORD)
            for e in range(20):
                h.add_entry(b"%d-%d" % (n, e))
            h.close()
            ids.append(h.ledger_id)
        victim = bk.ledger_metadata(ids[0]).fragments[0][1][0]
        lb.kill(lb.bookies.index(victim))

        def healed():
            return not any(victim in ens for lid in ids for _, ens in bk.ledger_metadata(lid).fragments)
        deadline = time.monotonic() + 120
        while not healed():
            assert time.monotonic() < deadline, "\n".join(lb.log(i)[-2000:] for i in range(4))
            time.sleep(0.5)
        for n, lid in enumerate(ids):
            rh = bk.open_ledger(lid, password=PASSWORD)
            assert [e.data for e in rh.read_entries(0, 19)] == [b"%d-%d" % (n, e) for e in range(20)]
