"""Which key a client pins (issue 39 item 6; client/auth.py, client/connection.py), on real
bookies and their registrations:

- an explicit ``curveServerKeys`` pin wins over the key a registration publishes: a registration
  rewritten to name another key does not take the pinned bookie from its client;
- a registration that publishes no key (a benchmark's clear-text baseline) is refused, the
  bookie treated as down, unless the client sets ``allowClearTextBookies=true``.
"""

from __future__ import annotations

import orjson
import pytest
import zmq

from bookie.client import BookKeeper
from bookie.client.errors import BookKeeperError
from bookie.client.resolver import KEY_FIELD
from bookie.metadata import open_metadata
from bookie.metadata.store import AVAILABLE, join
from bookie.storage.layout import PUBLIC_KEY_FIELD, cookie_in
from bookie.testing import LocalBookies
from bookie.workers.auth import PLAINTEXT_ENV

PW = b"pins"
QUICK = {"addEntryTimeout": 2.0, "operationTimeout": 20.0}


def writes(bk) -> None:
    lh = bk.create_ledger(1, 1, 1, password=PW)
    lh.add_entry(b"pinned")
    lh.close()


def test_an_explicit_pin_wins_over_the_key_a_registration_publishes(tmp_path, monkeypatch):
    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as lb:
        bookie = lb.bookies[0]
        real = cookie_in(lb.journal_dirs(0)[0])[PUBLIC_KEY_FIELD]
        pin = tmp_path / "bookie.key"
        pin.write_text(f'metadata\ncurve\n    public-key = "{real}"\n')
        impostor = zmq.curve_keypair()[0].decode("ascii")
        with open_metadata(lb.metadata_uri) as store:
            path = join(AVAILABLE, bookie)
            info = orjson.loads(store.get(path)[0])
            store.set(path, orjson.dumps({**info, KEY_FIELD: impostor}), None)
            assert store.bookie_info(bookie)[KEY_FIELD] == impostor
        with BookKeeper(lb.metadata_uri, QUICK, curveServerKeys=str(pin)) as bk:
            writes(bk)  # the pinned key, not the registration's, is proved


def test_a_registration_without_a_key_is_refused_unless_clear_text_is_allowed(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv(PLAINTEXT_ENV, "1")  # the bookie serves in the clear, publishes no key
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as lb:
        with BookKeeper(lb.metadata_uri, QUICK) as bk:
            with pytest.raises(BookKeeperError):
                writes(bk)
        with BookKeeper(lb.metadata_uri, QUICK, allowClearTextBookies=True) as bk:
            writes(bk)
