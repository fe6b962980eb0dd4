"""Configuration as BookKeeper operators write it: zkServers, ';' between hosts, "did you mean",
and a file named where a directory belongs."""

import pytest

from bookie.workers.config import BookieConfig, ConfigError, parse_properties


def _conf(tmp_path, **raw):
    (tmp_path / "j").mkdir(exist_ok=True)
    (tmp_path / "l").mkdir(exist_ok=True)
    base = {"journalDirectory": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l")}
    base.update(raw)
    return BookieConfig.from_mapping(base)


def test_zkservers_and_ledgers_root_path_name_the_metadata_store(tmp_path):
    conf = _conf(tmp_path, zkServers="zk1:2181,zk2:2181", zkLedgersRootPath="/bk/ledgers")
    assert conf.metadata_uri == "zk://zk1:2181,zk2:2181/bk/ledgers"
    assert conf.zk_servers == "zk1:2181,zk2:2181" and conf.zk_ledgers_root_path == "/bk/ledgers"
    assert conf.warnings == []


def test_zkservers_alone_uses_bookkeepers_default_root(tmp_path):
    assert _conf(tmp_path, zkServers="zk1:2181").metadata_uri == "zk://zk1:2181/ledgers"


@pytest.mark.parametrize("raw, uri", [
    ({"zkServers": "zk1:2181;zk2:2181; zk3:2181"}, "zk://zk1:2181,zk2:2181,zk3:2181/ledgers"),
    ({"metadataServiceUri": "zk+hierarchical://zk1:2181;zk2:2181/ledgers"},
     "zk+hierarchical://zk1:2181,zk2:2181/ledgers"),
    ({"metadataServiceUri": "zk://zk1:2181;zk2:2181"}, "zk://zk1:2181,zk2:2181"),
])
def test_bookkeepers_semicolon_between_zookeeper_hosts_is_accepted(tmp_path, raw, uri):
    assert _conf(tmp_path, **raw).metadata_uri == uri


def test_metadata_service_uri_wins_over_zkservers_and_says_so(tmp_path):
    conf = _conf(tmp_path, metadataServiceUri="lmdb:///var/lib/bookie/metadata",
                 zkServers="zk1:2181")
    assert conf.metadata_uri == "lmdb:///var/lib/bookie/metadata"
    assert conf.warnings == ["zkServers and zkLedgersRootPath ignored: metadataServiceUri is set"]


def test_a_ledgers_root_path_without_servers_is_a_warning(tmp_path):
    conf = _conf(tmp_path, zkLedgersRootPath="/ledgers")
    assert conf.metadata_uri == ""
    assert conf.warnings == ["zkLedgersRootPath ignored: neither zkServers nor "
                             "metadataServiceUri is set"]


@pytest.mark.parametrize("raw, words", [
    ({"zkServers": "zk1"}, "zkServers: 'zk://zk1/ledgers': 'zk1' is not host:port"),
    ({"zkServers": "zk1:2181", "zkLedgersRootPath": "ledgers"},
     "zkLedgersRootPath: 'ledgers' must be an absolute ZooKeeper path"),
    ({"metadataServiceUri": "zk://zk1:99999/ledgers"}, "metadataServiceUri: 'zk://zk1:99999"),
    ({"metadataServiceUri": "lmdb://relative/path"}, "metadataServiceUri: 'lmdb://relative/path'"),
])
def test_an_unusable_metadata_store_is_one_line_naming_the_key(tmp_path, raw, words):
    with pytest.raises(ConfigError) as e:
        _conf(tmp_path, **raw)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("written, meant", [
    ("journalDir", "journalDirectory"),
    ("ledgerDirectory", "ledgerDirectories"),
    ("bookieport", "bookiePort"),
    ("zkServer", "zkServers"),
    ("flushIntervall", "flushInterval"),
])
def test_an_unknown_key_suggests_the_nearest_known_one(tmp_path, written, meant):
    conf = _conf(tmp_path, **{written: "1"})
    assert conf.warnings == [f"unknown configuration key {written!r} ignored "
                             f"(did you mean {meant!r}?)"]


def test_an_unknown_key_far_from_any_known_one_suggests_nothing(tmp_path):
    assert _conf(tmp_path, colourOfTheBikeshed="red").warnings == [
        "unknown configuration key 'colourOfTheBikeshed' ignored"]


def test_bookkeepers_own_keys_are_one_line_apart_from_a_typo_and_duplicates_are_named(tmp_path):
    """A stock bk_server.conf: its keys with no meaning here are named once, on their own
    line; the one real typo is its own warning; a key given twice says which line wins."""
    (tmp_path / "j").mkdir()
    (tmp_path / "l").mkdir()
    conf_file = tmp_path / "bk_server.conf"
    conf_file.write_text(
        f"journalDirectory={tmp_path / 'j'}\nledgerDirectories={tmp_path / 'l'}\n"
        "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage\n"
        "dbStorage_writeCacheMaxSizeMb=512\nserverTcpNoDelay=true\nledgerManagerType=hierarchical\n"
        "statsProviderClass=org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider\n"
        "journalDirectoy=/tmp/oops\nbookiePort=3181\nbookiePort=4181\n")
    conf = BookieConfig.load(str(conf_file))
    assert conf.bookie_port == 4181
    assert conf.warnings == [
        f"{conf_file}: bookiePort is set 2 times (lines 9, 10): the last one is used",
        "unknown configuration key 'journalDirectoy' ignored (did you mean 'journalDirectory'?)",
        "5 BookKeeper key(s) with no meaning in this bookie accepted and ignored: "
        "dbStorage_writeCacheMaxSizeMb, ledgerManagerType, ledgerStorageClass, "
        "serverTcpNoDelay, statsProviderClass"], conf.warnings


@pytest.mark.parametrize("key", ["journalDirectory", "ledgerDirectories", "indexDirectories"])
def test_a_file_where_a_directory_belongs_is_named_as_such(tmp_path, key):
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(ConfigError) as e:
        _conf(tmp_path, **{key: str(tmp_path / "afile")})
    assert str(e.value) == f"{key}: {str(tmp_path / 'afile')!r} is a file, not a directory"


def test_a_file_where_the_embedded_store_or_stats_belong_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="metadataServiceUri: .* is a file, not a directory"):
        _conf(tmp_path, metadataServiceUri=f"lmdb://{tmp_path / 'afile'}")
    with pytest.raises(ConfigError, match="statsDirectory: .* is a file, not a directory"):
        _conf(tmp_path, statsDirectory=str(tmp_path / "afile"))


def test_a_bookkeeper_style_server_conf_loads(tmp_path):
    (tmp_path / "j").mkdir()
    (tmp_path / "l").mkdir()
    text = (f"bookiePort=3181\njournalDirectory={tmp_path / 'j'}\n"
            f"ledgerDirectories={tmp_path / 'l'}\n"
            "zkServers=zk1:2181;zk2:2181\nzkLedgersRootPath=/ledgers\nzkTimeout=10000\n")
    conf = BookieConfig.from_mapping(parse_properties(text))
    assert conf.metadata_uri == "zk://zk1:2181,zk2:2181/ledgers" and conf.warnings == []
