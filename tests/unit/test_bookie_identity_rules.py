"""The pieces of a bookie's identity that need no process: its key file and cookie, the
rename of an id in ensembles, who holds a port, the resolver's reading of a registration."""

from __future__ import annotations

import os
import socket

import orjson
import pytest
import zmq.auth

from bookie.appliance.shell.rename import renamed
from bookie.appliance.startchecks import StartRefused, check_ports_free, port_holder
from bookie.client.resolver import Target, target_of
from bookie.storage import server_key
from bookie.storage.layout import PUBLIC_KEY_FIELD, LayoutError, check_or_stamp, local_cookie
from bookie.workers.config import BookieConfig


def conf_of(tmp_path, **more) -> BookieConfig:
    return BookieConfig.from_mapping({"journalDirectory": str(tmp_path / "j"),
                                      "ledgerDirectories": str(tmp_path / "l"),
                                      "bookiePort": "3181", **more}, check_dirs=False)


def test_the_first_start_makes_a_private_key_and_the_cookie_records_it(tmp_path):
    conf = conf_of(tmp_path)
    public = server_key.ensure(conf, None)
    path = server_key.key_path(conf)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert zmq.auth.load_certificate(path)[0].decode() == public
    cookie = check_or_stamp(conf, public)
    assert cookie[PUBLIC_KEY_FIELD] == public
    assert server_key.ensure(conf, local_cookie(conf)) == public  # the same key next start


def test_a_cookie_from_before_keys_is_upgraded_not_refused(tmp_path):
    conf = conf_of(tmp_path)
    old = check_or_stamp(conf)  # no key: a bookie of an earlier release
    assert PUBLIC_KEY_FIELD not in old
    public = server_key.ensure(conf, local_cookie(conf))
    assert check_or_stamp(conf, public)[PUBLIC_KEY_FIELD] == public
    for d in (conf.journal_dir, conf.ledger_dirs[0]):
        with open(os.path.join(d, "current", "cookie"), "rb") as f:
            assert orjson.loads(f.read())[PUBLIC_KEY_FIELD] == public


def test_a_key_that_changed_or_vanished_is_refused_naming_the_verb(tmp_path):
    conf = conf_of(tmp_path)
    check_or_stamp(conf, server_key.ensure(conf, None))
    server_key.write_new(server_key.key_path(conf))
    with pytest.raises(server_key.KeyChanged, match="bookie shell rotatekey"):
        server_key.ensure(conf, local_cookie(conf))
    os.unlink(server_key.key_path(conf))
    with pytest.raises(server_key.KeyChanged, match="bookie shell rotatekey"):
        server_key.ensure(conf, local_cookie(conf))
    other = zmq.curve_keypair()[0].decode()
    with pytest.raises(LayoutError, match="rotatekey"):
        check_or_stamp(conf, other)


def test_curve_secret_key_file_is_the_key_published(tmp_path):
    public_path, secret_path = zmq.auth.create_certificates(str(tmp_path), "bk")
    conf = conf_of(tmp_path, curveSecretKeyFile=secret_path)
    assert server_key.ensure(conf, None) == zmq.auth.load_certificate(public_path)[0].decode()


def test_rename_replaces_the_id_in_every_ensemble_and_refuses_a_duplicate():
    fragments = [(0, ["a:1", "b:1"]), (5, ["c:1", "b:1"])]
    assert renamed(fragments, "b:1", "bk-1") == [(0, ["a:1", "bk-1"]), (5, ["c:1", "bk-1"])]
    assert renamed(fragments, "z:1", "bk-1") is None
    with pytest.raises(ValueError, match="names both"):
        renamed(fragments, "b:1", "c:1")


def test_the_holder_of_a_port_is_named_and_a_start_waits_a_bounded_time():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        assert f"pid {os.getpid()}" in port_holder(port)
        conf = BookieConfig.from_mapping({"bookiePort": str(port)}, check_dirs=False)
        now = [0.0]
        slept = []

        def sleep(s):
            slept.append(s)
            now[0] += s
        with pytest.raises(StartRefused, match=f"held by pid {os.getpid()}"):
            check_ports_free(conf, wait_s=3.0, clock=lambda: now[0], sleep=sleep)
        assert 5 <= len(slept) <= 7  # tried again for the bounded time, then refused
    finally:
        listener.close()


def test_a_registration_names_its_address_and_key_and_an_old_one_no_key():
    key = zmq.curve_keypair()[0].decode()
    assert target_of({"host": "h", "add_port": 5, PUBLIC_KEY_FIELD: key}) == \
        Target("h", 5, key.encode())
    assert target_of({"host": "h", "add_port": 5}) == Target("h", 5, b"")
    assert target_of({"add_port": 5}) is None
