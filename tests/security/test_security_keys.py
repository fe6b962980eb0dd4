"""Master keys as secrets, against a real bookie: what its files hold, what binds a ledger id."""

import os

import pytest

from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status

KEY = b"writer-master-key-0123"
ATTACKER = b"attacker-master-key-99"


@pytest.fixture
def ens(secure_bookie):
    return secure_bookie


@pytest.fixture
def client(ens):
    with RawBookieClient(ens.bookies[0]) as c:
        yield c


def _files(root: str):
    for d, _, names in os.walk(root):
        for n in names:
            yield os.path.join(d, n)


def test_no_file_of_the_bookie_holds_a_master_key_in_any_form_a_client_sends(ens, client):
    ledger = 4242
    create_ledgers(ens.metadata_uri, [ledger], KEY)  # a bookie stores only ids its store knows
    entries = [make_entry(ledger, i, b"p%d" % i, lac=i - 1) for i in range(20)]
    assert client.add(ledger, entries, KEY) == Status.OK
    assert client.write_lac(ledger, 19, KEY) == Status.OK
    assert client.fence(ledger, KEY) == Status.OK
    # index commits, entry-log appends and journal writes are all in the files by the time the
    # answers came back (page cache is what another reader of the files sees)
    hits = []
    for path in _files(ens.bookie_dir(0)):
        with open(path, "rb") as f:
            data = f.read()
        if KEY in data or KEY.hex().encode() in data:
            hits.append(path)
    assert hits == []
    with RawBookieClient(ens.bookies[0]) as c:  # and the key still opens the ledger
        assert c.add(ledger, [make_entry(ledger, 20, b"x")], KEY, recovery=True) == Status.OK
        assert c.add(ledger, [make_entry(ledger, 21, b"x")], ATTACKER, recovery=True) == Status.UNAUTHORIZED


def test_an_explicit_lac_on_an_unused_ledger_id_binds_nothing(ens, client):
    ledger = 5151
    create_ledgers(ens.metadata_uri, [ledger], KEY)
    assert client.write_lac(ledger, 7, ATTACKER) == Status.NO_LEDGER
    assert client.read_lac(ledger)[0] == Status.NO_LEDGER
    assert client.add(ledger, [make_entry(ledger, 0, b"mine")], KEY) == Status.OK
    assert client.read(ledger, 0) == (Status.OK, [make_entry(ledger, 0, b"mine")])


def test_a_fence_on_an_unused_ledger_id_binds_no_key(ens, client):
    # a ledger whose metadata names its owner: a stranger's fence is refused before anything
    owned = 6160
    create_ledgers(ens.metadata_uri, [owned], KEY)
    assert client.fence(owned, ATTACKER) == Status.UNAUTHORIZED
    assert client.fence(owned, KEY) == Status.OK  # the owner's fence binds the owner
    assert client.add(owned, [make_entry(owned, 0, b"x")], ATTACKER, recovery=True) == Status.UNAUTHORIZED
    # a ledger of an older client (no key named): the fence holds but binds no key
    ledger = 6161
    create_ledgers(ens.metadata_uri, [ledger], None)
    assert client.fence(ledger, ATTACKER) == Status.OK  # the fence must hold (recovery safety)
    assert client.add(ledger, [make_entry(ledger, 0, b"x")], ATTACKER) == Status.FENCED
    assert client.write_lac(ledger, 3, ATTACKER) == Status.NO_LEDGER
    # the recoverer's first recovery add binds its key, not the fencer's
    assert client.add(ledger, [make_entry(ledger, 0, b"r")], KEY, recovery=True) == Status.OK
    assert client.add(ledger, [make_entry(ledger, 1, b"x")], ATTACKER, recovery=True) == Status.UNAUTHORIZED
    assert client.fence(ledger, ATTACKER) == Status.UNAUTHORIZED


def test_a_bookie_beyond_loopback_without_curve_is_refused_unless_the_operator_opts_out():
    import pytest

    from bookie.appliance.startchecks import StartRefused, check_client_security, exposure_warning
    from bookie.workers.config import BookieConfig

    def conf(host, **more):
        return BookieConfig.from_mapping({"listeningInterface": host, **more}, check_dirs=False)

    for host in ("127.0.0.1", "::1"):  # loopback: serves without enrolled keys, and says so
        level, line = check_client_security(conf(host))
        assert level == "info" and "no client key enrolled" in line and exposure_warning(conf(host)) is None
    for host in ("0.0.0.0", "10.1.2.3"):
        with pytest.raises(StartRefused, match="allowInsecureClients=true"):
            check_client_security(conf(host))
        level, line = check_client_security(conf(host, allowInsecureClients="true"))
        assert level == "warning" and "no authentication or encryption" in line
        assert "docs/security.md" in line
