"""Which key a replication worker's copies carry: the cluster recovery credential first, the
ledger's master key (a known password) only when the target refuses the credential.  The
bookies are a fake here (the key choice is pure logic); the store is a real embedded one."""

import pytest

from bookie.autorecovery import rules
from bookie.autorecovery.copier import CopyError, Refused
from bookie.autorecovery.replicator import Replicator
from bookie.client.digest import master_key
from bookie.metadata import open_metadata
from bookie.metadata.recovery_secret import credential, recovery_secret
from bookie.testing.rawclient import make_entry
from bookie.wire import Flag


class FakeBookies:
    def __init__(self, refuse_credential: bool):
        self.refuse_credential = refuse_credential
        self.added: list[tuple[bytes, int]] = []

    def read_strided(self, bookie, ledger_id, first, count, stride):
        return [make_entry(ledger_id, first + k * stride, b"x") for k in range(count)]

    def send_add(self, bookie, ledger_id, key, entries):
        self.added.append((key.key, key.flags))
        return key

    def add_done(self, bookie, ledger_id, key):
        if key.flags and self.refuse_credential:
            raise Refused(f"{bookie}: BAD_REQUEST")


@pytest.fixture
def store(tmp_path):
    with open_metadata(f"lmdb://{tmp_path}/md", create=True) as s:
        yield s


@pytest.mark.parametrize("refuse", [False, True])
def test_the_credential_first_and_the_password_when_it_is_refused(store, refuse):
    rep = Replicator(store)
    rep.bookies.close()
    rep.bookies = FakeBookies(refuse)
    keys = rep._keys(7, b"pw")
    cred = credential(recovery_secret(store, create=False), 7)
    assert keys[0].key == cred and keys[0].flags == int(Flag.RECOVERY_CREDENTIAL)
    assert keys[1].key == master_key(b"pw") and keys[1].flags == 0
    rep._copy(7, keys, [rules.Copy(0, 0, 3, ("a:1",))], 1, "t:1", 10)
    used = {k for k, _ in rep.bookies.added}
    assert used == ({cred, master_key(b"pw")} if refuse else {cred})


def test_without_a_known_password_a_refusal_is_a_copy_error(store):
    rep = Replicator(store)
    rep.bookies.close()
    rep.bookies = FakeBookies(True)
    keys = rep._keys(8, None)
    assert len(keys) == 1
    with pytest.raises(CopyError):
        rep._copy(8, keys, [rules.Copy(0, 0, 2, ("a:1",))], 1, "t:1", 10)


def test_a_dry_run_makes_no_secret(store):
    rep = Replicator(store, dry_run=True)
    assert rep._keys(9, None) == [] and recovery_secret(store, create=False) is None
    rep.close()


def test_no_key_is_no_copy_never_a_silent_success(store):
    """Issue 39: with no key (no secret, password unknown) ``_copy`` copied nothing and
    returned as if it had; the heal then repointed the position at an empty bookie."""
    from bookie.autorecovery.copier import NoKey
    rep = Replicator(store)
    rep.bookies.close()
    rep.bookies = FakeBookies(False)
    with pytest.raises(NoKey, match="zkBookieDigestAuthFile.*autoRecoveryLedgerPasswords"):
        rep._copy(10, [], [rules.Copy(0, 0, 2, ("a:1",))], 1, "t:1", 10)
    assert rep.bookies.added == []
    rep._copy(10, [], (), 1, "t:1", 10)  # a position holding no entry: repointed, no key needed
