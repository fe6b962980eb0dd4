"""BookKeeper's client configuration names (issue 24.5), pure: aliases mean what they mean to
BookKeeper's client, keys with no meaning here are accepted and kept aside, unknown keys are
refused naming the nearest one, and the metadata store is named the way client.conf names it."""

from __future__ import annotations

import pytest

from bookie.client.config import IGNORED_KEYS, ClientConfig
from bookie.client.errors import InvalidArgumentError
from bookie.client.options import client_keys
from bookie.spark.options import ReadOptions


def test_bookkeeper_names_set_the_same_settings():
    cfg = ClientConfig.build({"addEntryTimeoutSec": "3", "readEntryTimeoutSec": 4,
                              "firstSpeculativeReadTimeout": "250", "zkTimeout": "7000"})
    assert (cfg.addEntryTimeout, cfg.readTimeout) == (3.0, 4.0)
    assert (cfg.speculativeReadTimeout, cfg.zkTimeout) == (250, 7000)


def test_both_names_of_one_setting_must_agree():
    assert ClientConfig.build(addEntryTimeoutSec=2, addEntryTimeout=2).addEntryTimeout == 2
    with pytest.raises(InvalidArgumentError, match="disagree"):
        ClientConfig.build(addEntryTimeoutSec=1, addEntryTimeout=2)


def test_keys_without_meaning_here_are_accepted_and_kept_aside():
    cfg = ClientConfig.build({"useV2WireProtocol": "true", "numIOThreads": "8",
                              "readTimeout": "1"})
    assert cfg.ignored_keys == ("useV2WireProtocol", "numIOThreads")
    assert ClientConfig.build(cfg, throttle=7).ignored_keys == cfg.ignored_keys
    assert "useV2WireProtocol" in IGNORED_KEYS


@pytest.mark.parametrize("typo, near", [("readTimout", "readTimeout"),
                                        ("addEntryTimeoutSecs", "addEntryTimeoutSec"),
                                        ("metadataServiceURI", "metadataServiceUri")])
def test_unknown_keys_are_refused_with_did_you_mean(typo, near):
    with pytest.raises(InvalidArgumentError, match=f"unknown client configuration key "
                                                   f"'{typo}' \\(did you mean '{near}'\\?\\)"):
        ClientConfig.build({typo: "1"})


def test_security_keys_of_bookkeeper_are_not_silently_ignored():
    with pytest.raises(InvalidArgumentError, match="unknown client configuration key"):
        ClientConfig.build(tlsProviderFactoryClass="x")


@pytest.mark.parametrize("keys, uri", [
    ({"metadataServiceUri": "zk+hierarchical://zk1:2181;zk2:2181/ledgers"},
     "zk+hierarchical://zk1:2181,zk2:2181/ledgers"),
    ({"zkServers": "zk1:2181, zk2:2181", "zkLedgersRootPath": "/bk"}, "zk://zk1:2181,zk2:2181/bk"),
    ({"metadataServiceUri": "lmdb:///m", "zkServers": "zk1:2181"}, "lmdb:///m"),
    ({}, ""),
])
def test_the_metadata_store_is_named_as_client_conf_names_it(keys, uri):
    assert ClientConfig.build(keys).metadata_uri == uri


def test_a_bad_metadata_uri_and_an_unknown_placement_are_refused():
    with pytest.raises(InvalidArgumentError, match="metadataServiceUri"):
        ClientConfig.build(metadataServiceUri="http://x")
    assert ClientConfig.build(ensemblePlacementPolicy="org.apache.bookkeeper.client."
                                                      "DefaultEnsemblePlacementPolicy"
                              ).placement_policy == "default"
    assert ClientConfig.build(ensemblePlacementPolicy="org.apache.bookkeeper.client."
                                                      "RackawareEnsemblePlacementPolicy"
                              ).placement_policy == "rackaware"
    with pytest.raises(InvalidArgumentError, match="must be default, rackaware or regionaware"):
        ClientConfig.build(ensemblePlacementPolicy="zoneaware")


def test_client_conf_file_with_bookkeeper_names(tmp_path):
    conf = tmp_path / "client.conf"
    conf.write_text("metadataServiceUri=lmdb:///srv/m\naddEntryTimeoutSec=9\n"
                    "useV2WireProtocol=true\n")
    cfg = ClientConfig.from_file(str(conf), throttle=3)
    assert (cfg.metadata_uri, cfg.addEntryTimeout, cfg.throttle) == ("lmdb:///srv/m", 9.0, 3)
    assert client_keys(str(conf), ["readEntryTimeoutSec=2"])["readEntryTimeoutSec"] == 2.0
    conf.write_text("addEntryTimeoutSec=soon\n")
    with pytest.raises(InvalidArgumentError, match="client.conf: client key "
                                                   "addEntryTimeoutSec='soon' is not a number"):
        ClientConfig.from_file(str(conf))


def test_spark_takes_bookkeeper_names_too():
    ro = ReadOptions.parse({"metadataServiceUri": "lmdb:///m", "ledgers": "1",
                            "bookkeeper.addEntryTimeoutSec": "2",
                            "bookkeeper.useV2WireProtocol": "false"}, stream=False)
    cfg = ClientConfig.build(dict(ro.conn.config))
    assert cfg.addEntryTimeout == 2.0 and cfg.ignored_keys == ("useV2WireProtocol",)
