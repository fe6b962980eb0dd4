"""Password verifiers are no offline guessing oracle (issue 22, finding 2).

Against a real bookie and its metadata store, through the real client:

- two ledgers of one password carry different ``password_digest`` and ``key_check`` (salted per
  ledger), each a scrypt verifier whose parameters are stored with it;
- one guess against what the metadata holds costs a scrypt (milliseconds, not the
  microseconds of a SHA-256): the test times a wrong guess against the stored values;
- the right password opens, a wrong one is refused before anything is fenced, and a record in
  the older form (SHA-256 digest, salted SHA-256 key check) still opens and still refuses;
- the bookie checks a request's key against the new verifier before it stores anything.
"""

from __future__ import annotations

import time

import pytest

from bookie.client import BookKeeper
from bookie.client.digest import master_key
from bookie.client.errors import UnauthorizedError
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import (KEY_CHECK_SIZE, key_check_matches, legacy_password_digest,
                                    password_matches, verifier_parameters)
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

PASSWORD = b"correct horse battery staple"


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("verifiers")),
                      conf={"flushInterval": 50}) as e:
        yield e


def stored(ens, ledger_id: int) -> LedgerMetadata:
    with open_metadata(ens.metadata_uri) as store:
        return store.read_ledger_latest(ledger_id)[0]


def test_verifiers_are_salted_per_ledger_with_their_parameters(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        ids = []
        for _ in range(2):
            h = bk.create_ledger(1, 1, 1, password=PASSWORD)
            h.add_entry(b"x")
            h.close()
            ids.append(h.ledger_id)
    a, b = (stored(ens, i) for i in ids)
    assert a.password_digest != b.password_digest and a.key_check != b.key_check
    for meta in (a, b):
        assert verifier_parameters(bytes(meta.password_digest)) == {"kdf": "scrypt", "n": 4096, "r": 8, "p": 1}
        assert verifier_parameters(bytes(meta.key_check)) is not None
        assert password_matches(meta.password_digest, PASSWORD, master_key(PASSWORD))
        assert key_check_matches(meta.key_check, master_key(PASSWORD))


def test_a_guess_against_the_metadata_costs_a_scrypt(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        h = bk.create_ledger(1, 1, 1, password=PASSWORD)
        h.close()
    meta = stored(ens, h.ledger_id)
    guesses = [b"guess-%d" % i for i in range(5)]
    t0 = time.perf_counter()
    for g in guesses:
        assert not password_matches(meta.password_digest, g, master_key(g))
    per_password_guess_s = (time.perf_counter() - t0) / len(guesses)
    t0 = time.perf_counter()
    for g in guesses:
        assert not key_check_matches(meta.key_check, master_key(g + b"!"))
    per_key_guess_s = (time.perf_counter() - t0) / len(guesses)
    # a SHA-256 is about a microsecond; scrypt(N=2**12, r=8) about ten milliseconds
    assert per_password_guess_s > 0.002 and per_key_guess_s > 0.002, (per_password_guess_s, per_key_guess_s)


def test_right_password_opens_wrong_is_refused_and_older_records_still_verify(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        h = bk.create_ledger(1, 1, 1, password=PASSWORD)
        h.add_entry(b"new form")
        h.close()
        assert bk.open_ledger(h.ledger_id, password=PASSWORD).read_entries_async(0, 0).result()[0].data == b"new form"
        with pytest.raises(UnauthorizedError):
            bk.open_ledger(h.ledger_id, password=b"wrong")
        # an older client's record: SHA-256 password digest, salted SHA-256 key check
        import hashlib
        import os
        salt = os.urandom(16)
        old_check = salt + hashlib.sha256(b"bookie-ledger-key-check\0" + salt + master_key(PASSWORD)).digest()
        assert len(old_check) == KEY_CHECK_SIZE
        with open_metadata(ens.metadata_uri) as store:
            old_id, _ = store.create_ledger(LedgerMetadata(
                1, 1, 1, digest_type="dummy", password_digest=legacy_password_digest(PASSWORD),
                key_check=old_check,
                fragments=[(0, [ens.bookies[0]])]))
        with RawBookieClient(ens.bookies[0]) as raw:
            assert raw.add(old_id, [make_entry(old_id, 0, b"old form")], master_key(PASSWORD)) == Status.OK
        with pytest.raises(UnauthorizedError):
            bk.open_ledger(old_id, digest="dummy", password=b"wrong")
        rh = bk.open_ledger(old_id, digest="dummy", password=PASSWORD)
        assert rh.read_entries_async(0, 0).result()[0].data.endswith(b"old form")  # raw entry
        assert key_check_matches(stored(ens, old_id).key_check, master_key(PASSWORD))


def test_the_bookie_checks_the_new_verifier_before_it_stores_anything(ens):
    """The bookie looks a new ledger's owner up and verifies the request's key against the
    ledger's key check (bookie.workers.claims): the writer's key passes, another is refused."""
    with BookKeeper(ens.metadata_uri) as bk, RawBookieClient(ens.bookies[0]) as raw:
        h = bk.create_ledger(1, 1, 1, password=PASSWORD)
        lid = h.ledger_id
        assert raw.add(lid, [make_entry(lid, 0, b"squat")], b"s" * 20) == Status.UNAUTHORIZED
        h.add_entry(b"mine")
        h.close()
        assert bk.open_ledger(lid, password=PASSWORD).read_entries_async(0, 0).result()[0].data == b"mine"
