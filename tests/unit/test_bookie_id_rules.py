"""Bookie ids: BookKeeper's rules for ``bookieId`` (bookie.metadata.bookie_ids), the
configuration key, and the resolver that turns an id into an address (bookie.client.resolver)
over a real embedded metadata store."""

from __future__ import annotations

import threading

import pytest

from bookie.client.connection import parse_bookie
from bookie.client.resolver import BookieResolver, UnresolvedBookieError, address_of
from bookie.metadata import open_metadata
from bookie.metadata.bookie_ids import (address_id_problem, bookie_id_problem, is_address,
                                        split_address)
from bookie.workers.config import BookieConfig, ConfigError
import waiting


@pytest.mark.parametrize("good", ["bk-1", "bookie.rack1.example", "BK_7", "a", "x" * 255,
                                  "h1:3181", "::1:3181", "zone:a"])
def test_ids_bookkeeper_accepts(good):
    assert bookie_id_problem(good) is None


@pytest.mark.parametrize("bad,why", [("", "empty"), ("bk/1", "only ASCII"), ("bk 1", "only ASCII"),
                                     ("bk-é", "only ASCII"), ("readonly", "reserved"),
                                     ("..", "reserved"), ("x" * 256, "longer than 255"),
                                     ("bk\n1", "only ASCII")])
def test_ids_that_are_refused_say_why(bad, why):
    assert why in bookie_id_problem(bad)


def test_an_id_is_an_address_when_it_ends_in_a_port():
    assert split_address("127.0.0.1:3181") == ("127.0.0.1", 3181)
    assert split_address("::1:3181") == ("::1", 3181)
    assert not is_address("bk-1") and not is_address("zone:a") and not is_address(":3181")
    assert not is_address("h:65535")  # no room for the read port
    assert parse_bookie("h1:3181") == ("h1", 3181)
    with pytest.raises(ValueError, match="not host:port"):
        parse_bookie("bk-1")


def test_an_address_shaped_id_must_be_the_bookies_own_address():
    assert address_id_problem("bk-1", "127.0.0.1:3181") is None
    assert address_id_problem("127.0.0.1:3181", "127.0.0.1:3181") is None
    assert "another bookie" in address_id_problem("127.0.0.1:4000", "127.0.0.1:3181")


def _conf(tmp_path, **keys):
    for name in ("journal", "ledgers"):
        (tmp_path / name).mkdir(exist_ok=True)
    return BookieConfig.load(overrides={"journalDirectory": str(tmp_path / "journal"),
                                        "ledgerDirectories": str(tmp_path / "ledgers"), **keys})


def test_the_configuration_key_names_the_bookie(tmp_path):
    conf = _conf(tmp_path, bookiePort="4000", advertisedAddress="h9")
    assert conf.bookie_id == conf.bookie_address == "h9:4000"
    conf = _conf(tmp_path, bookiePort="4000", bookieId="bk-1")
    assert (conf.bookie_id, conf.bookie_address) == ("bk-1", "127.0.0.1:4000")
    for bad in ("bk/1", "readonly", "bk 1"):
        with pytest.raises(ConfigError, match="bookieId"):
            _conf(tmp_path, bookieId=bad)


def test_address_of_a_registration():
    assert address_of({"host": "h", "add_port": 5000}) == ("h", 5000)
    for info in (None, {}, {"host": "h"}, {"host": "", "add_port": 5},
                 {"host": "h", "add_port": "5"}, {"host": "h", "add_port": True},
                 {"host": "h", "add_port": 70000}):
        assert address_of(info) is None


@pytest.fixture
def store(tmp_path):
    with open_metadata(f"lmdb://{tmp_path}/md", create=True, lease_ms=1000,
                       watch_poll_s=0.05) as s:
        yield s


def test_the_resolver_reads_every_id_from_its_registration(store):
    """Issue 30: with a store, address ids are looked up too (their key is in the
    registration), and a bookie registered nowhere is down: its last address is never used."""
    resolver = BookieResolver(store)
    try:
        with pytest.raises(UnresolvedBookieError, match="not registered"):
            resolver.address("h1:3181")  # an address id with a store: its registration
        assert BookieResolver(None).address("h1:3181") == ("h1", 3181)  # no store: itself
        with pytest.raises(UnresolvedBookieError, match="not registered"):
            resolver.address("bk-1")
        reg = store.register_bookie("bk-1", info={"host": "127.0.0.1", "add_port": 5000})
        assert resolver.resolve("bk-1", fresh=True)[:2] == ("127.0.0.1", 5000)
        reg.close()
        # registered nowhere now: down, the old address is not the answer
        waiting.wait_for(lambda: "bk-1" not in store.registered_bookies(), 10, "unregistered")
        with pytest.raises(UnresolvedBookieError, match="not registered"):
            resolver.resolve("bk-1", fresh=True)
    finally:
        resolver.close()
    with pytest.raises(UnresolvedBookieError, match="no metadata store"):
        BookieResolver(None).address("bk-1")


def test_the_resolver_sees_a_bookie_move_and_says_so(store):
    resolver = BookieResolver(store)
    moved = []
    seen = threading.Event()
    resolver.on_moved.append(lambda b: (moved.append(b), seen.set()))
    try:
        reg = store.register_bookie("bk-1", info={"host": "127.0.0.1", "add_port": 5000})
        assert resolver.address("bk-1") == ("127.0.0.1", 5000)
        reg.close()
        waiting.wait_for(lambda: "bk-1" not in store.registered_bookies(), 10, "unregistered")
        store.register_bookie("bk-1", info={"host": "127.0.0.1", "add_port": 6000})
        assert seen.wait(10), "the watch did not report the move"
        def at_6000() -> bool:  # learnt from the watch, no fresh read
            try:
                return resolver.resolve("bk-1").port == 6000
            except UnresolvedBookieError:
                return False
        waiting.wait_for(at_6000, 10, "the new address")
        assert set(moved) == {"bk-1"}  # unregistered, then registered elsewhere
    finally:
        resolver.close()


def test_a_failed_connection_makes_the_resolver_read_again(store):
    resolver = BookieResolver(store)
    try:
        reg = store.register_bookie("bk-2", info={"host": "127.0.0.1", "add_port": 5000})
        assert resolver.address("bk-2") == ("127.0.0.1", 5000)
        resolver.close()  # no watch: only ``forget`` can make it read again
        reg.close()
        store.register_bookie("bk-2", info={"host": "127.0.0.1", "add_port": 7000})
        assert resolver.address("bk-2") == ("127.0.0.1", 5000)  # cached
        moved = threading.Event()
        resolver.on_moved.append(lambda b: moved.set())
        resolver.forget("bk-2")  # read again, in the background
        assert moved.wait(10)
        assert resolver.address("bk-2") == ("127.0.0.1", 7000)
    finally:
        resolver.close()
