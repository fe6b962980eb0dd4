"""The cluster recovery credential against real bookies: only the right one fences or writes
recovery copies, the flag never rides a normal add or an explicit LAC, and under CURVE only an
admin principal (or the bookie's own key) may use it."""

import os

import pytest
import zmq
import zmq.auth

from bookie import wire
from bookie.client.auth import ClientCurve
from bookie.client.digest import master_key
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.recovery_secret import credential, recovery_secret
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status

KEY = master_key(b"a-password-autorecovery-is-not-told")
CRED = int(Flag.RECOVERY_CREDENTIAL)


def new_ledger(ens) -> tuple[int, bytes]:
    """A ledger id the store made, and its credential as autorecovery computes it."""
    with open_metadata(ens.metadata_uri) as store:
        lid, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        return lid, credential(recovery_secret(store, create=False), lid)


def cred_add(c, lid, entries, cred, flags=Flag.RECOVERY_ADD | CRED):
    lengths, data = wire.pack_batch(entries)
    return c.request(c.add_sock, Op.ADD, lid, int(flags), [cred, lengths, data])[0]


def cred_fence(c, lid, cred):
    return c.request(c.read_sock, Op.READ_LAC, lid, int(Flag.FENCE | CRED), [cred])[0]


@pytest.fixture
def client(secure_bookie):
    with RawBookieClient(secure_bookie.bookies[0], timeout_s=10) as c:
        yield c


def test_the_bookie_made_the_secret_at_start_and_keeps_it_private(secure_bookie):
    secret = recovery_secret_of(secure_bookie)
    assert len(secret) == 32
    assert secret.hex() not in secure_bookie.log(0)
    for pid in filter(str.isdigit, os.listdir("/proc")):  # never on a command line
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        assert secret not in cmdline and secret.hex().encode() not in cmdline


def test_a_wrong_credential_cannot_fence_or_write_a_copy(secure_bookie, client):
    lid, cred = new_ledger(secure_bookie)
    other, _ = new_ledger(secure_bookie)
    assert client.add(lid, [make_entry(lid, 0, b"mine")], KEY) == Status.OK
    for wrong in (credential(bytes(32), lid), credential(recovery_secret_of(secure_bookie), other), KEY):
        assert cred_fence(client, lid, wrong) == Status.UNAUTHORIZED
        assert cred_add(client, lid, [make_entry(lid, 1, b"forged")], wrong) == Status.UNAUTHORIZED
    assert client.add(lid, [make_entry(lid, 1, b"still mine")], KEY) == Status.OK  # not fenced
    assert client.read(lid, 1)[1] == [make_entry(lid, 1, b"still mine")]


def recovery_secret_of(ens) -> bytes:
    with open_metadata(ens.metadata_uri) as store:
        return recovery_secret(store, create=False)


def test_the_flag_on_a_normal_add_or_an_explicit_lac_is_refused(secure_bookie, client):
    lid, cred = new_ledger(secure_bookie)
    assert client.add(lid, [make_entry(lid, 0, b"x")], KEY) == Status.OK
    assert cred_add(client, lid, [make_entry(lid, 1, b"y")], cred, flags=CRED) == Status.BAD_REQUEST
    status, _ = client.request(client.add_sock, Op.WRITE_LAC, lid, CRED, [cred, wire.WRITE_LAC_BODY.pack(0)])
    assert status == Status.BAD_REQUEST
    status, _ = client.request(client.read_sock, Op.READ, lid, CRED, [wire.READ_BODY.pack(0, 1)])
    assert status == Status.BAD_REQUEST
    assert client.read_lac(lid)[1:] == (-1, 0)  # nothing of it was taken


def test_the_right_credential_fences_and_copies_as_the_writer_would(secure_bookie, client):
    lid, cred = new_ledger(secure_bookie)
    assert client.add(lid, [make_entry(lid, 0, b"e0")], KEY) == Status.OK
    assert cred_fence(client, lid, cred) == Status.OK
    assert client.add(lid, [make_entry(lid, 1, b"late")], KEY) == Status.FENCED
    assert cred_add(client, lid, [make_entry(lid, 1, b"e1")], cred) == Status.OK
    assert client.add(lid, [make_entry(lid, 2, b"e2")], KEY, recovery=True) == Status.OK  # still bound to KEY
    assert client.add(lid, [make_entry(lid, 3, b"e3")], b"squatter", recovery=True) == Status.UNAUTHORIZED
    assert client.read(lid, 0, 3)[1] == [make_entry(lid, e, b"e%d" % e) for e in range(3)]


def test_a_copy_to_a_bookie_that_never_saw_the_ledger_binds_nothing(secure_bookie, client):
    lid, cred = new_ledger(secure_bookie)
    assert cred_add(client, lid, [make_entry(lid, 0, b"copy")], cred) == Status.OK
    assert client.read(lid, 0)[1] == [make_entry(lid, 0, b"copy")]
    assert client.add(lid, [make_entry(lid, 1, b"first real add")], KEY) == Status.OK  # binds KEY
    assert client.add(lid, [make_entry(lid, 2, b"x")], b"another") == Status.UNAUTHORIZED
    with open_metadata(secure_bookie.metadata_uri) as store:
        store.remove_ledger(lid)


# -- CURVE: the flag needs role admin -------------------------------------------------------------

@pytest.fixture(scope="module")
def curve_ens(tmp_path_factory):
    root = tmp_path_factory.mktemp("curvecred")
    made = {n: zmq.auth.create_certificates(str(root), n) for n in ("bookie", "wally", "ada")}
    for role, name in (("writer", "wally"), ("admin", "ada")):
        os.makedirs(root / "clients" / role)
        with open(made[name][0]) as src, open(root / "clients" / role / f"{name}.key", "w") as dst:
            dst.write(src.read())
    conf = {"curveSecretKeyFile": made["bookie"][1],
            "curveClientKeysDirectory": str(root / "clients"), "flushInterval": 50}
    with LocalBookies(1, conf=conf) as ens:
        yield ens, made


@pytest.mark.parametrize("who, allowed", [("wally", False), ("ada", True), ("bookie", True)],
                         ids=["writer", "admin", "the-bookies-own-key"])
def test_under_curve_only_an_admin_may_use_the_credential(curve_ens, who, allowed):
    ens, keys = curve_ens
    lid, cred = new_ledger(ens)
    curve = ClientCurve(keys[who][1], keys["bookie"][0])
    with RawBookieClient(ens.bookies[0], timeout_s=10, ctx=zmq.Context(), curve=curve) as c:
        assert c.add(lid, [make_entry(lid, 0, b"w")], KEY) == Status.OK
        want = Status.OK if allowed else Status.UNAUTHORIZED
        assert cred_add(c, lid, [make_entry(lid, 1, b"copy")], cred) == want
        assert cred_fence(c, lid, cred) == want
        assert c.add(lid, [make_entry(lid, 2, b"n")], KEY) == (Status.FENCED if allowed else Status.OK)
