"""Configuration keys and directory layout / cookies: clear refusals, naming what is wrong."""

import os
import subprocess
import sys

import pytest

from bookie.workers import config
from bookie.workers.config import BookieConfig, ConfigError
from bookie.storage.layout import LayoutError, check_or_stamp, format_bookie


def _conf(tmp_path, **over):
    for name in ("j", "l1", "l2"):
        (tmp_path / name).mkdir(exist_ok=True)
    raw = {"journalDirectory": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l1"),
           "bookiePort": "3999"}
    raw.update(over)
    return BookieConfig.from_mapping(raw)


@pytest.mark.parametrize("key, value, words", [
    ("bookiePort", "abc", "bookiePort: 'abc' is not an integer"),
    ("bookiePort", "70000", "bookiePort: 70000 must be a TCP port"),
    ("journalAdaptiveGroupWrites", "maybe", "journalAdaptiveGroupWrites: 'maybe' is not true or false"),
    ("diskUsageThreshold", "1.5", "diskUsageThreshold: 1.5 must be <= 1.0"),
    ("journalMaxSizeMB", "0", "journalMaxSizeMB: 0 must be >= 1"),
    ("metadataServiceUri", "http://x", "metadataServiceUri: 'http://x' must be"),
    ("journalDirectory", "/does/not/exist", "journalDirectory: directory '/does/not/exist' does not exist"),
])
def test_a_bad_value_is_one_line_naming_the_key(tmp_path, key, value, words):
    with pytest.raises(ConfigError) as e:
        _conf(tmp_path, **{key: value})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unknown_keys_are_warnings_and_properties_parse(tmp_path):
    text = "# comment\n! also\n\nbookiePort = 4000\njournalMaxBackups: 3\nnoSuchKey=1\n"
    raw = config.parse_properties(text)
    assert raw == {"bookiePort": "4000", "journalMaxBackups": "3", "noSuchKey": "1"}
    conf = _conf(tmp_path, **raw)
    assert conf.bookie_port == 4000 and conf.journal_max_backups == 3
    assert conf.warnings == ["unknown configuration key 'noSuchKey' ignored"]
    with pytest.raises(ConfigError, match="expected key=value"):
        config.parse_properties("justakey\n")


def test_docs_list_every_key_with_its_default():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "configuration.md")) as f:
        doc = f.read()
    assert config.keys_markdown() in doc


def test_first_start_stamps_every_directory_and_later_starts_match(tmp_path):
    conf = _conf(tmp_path)
    cookie = check_or_stamp(conf)
    assert check_or_stamp(conf) == cookie
    for d in ("j", "l1"):
        assert (tmp_path / d / "current" / "cookie").exists()
        assert (tmp_path / d / "current" / "VERSION").read_text().strip() == "1"


def test_a_changed_disk_set_is_refused(tmp_path):
    check_or_stamp(_conf(tmp_path))
    with pytest.raises(LayoutError, match="l2: has no cookie"):
        check_or_stamp(_conf(tmp_path, ledgerDirectories=f"{tmp_path / 'l1'},{tmp_path / 'l2'}"))
    with pytest.raises(LayoutError, match="cookie is of bookie id .* updatecookie"):
        check_or_stamp(_conf(tmp_path, bookiePort="4001"))


def test_a_lost_cookie_or_data_without_one_is_refused(tmp_path):
    conf = _conf(tmp_path)
    check_or_stamp(conf)
    os.unlink(tmp_path / "l1" / "current" / "cookie")
    with pytest.raises(LayoutError, match="l1: has no cookie"):
        check_or_stamp(conf)
    format_bookie(conf, force=True)
    (tmp_path / "j" / "current").mkdir()
    (tmp_path / "j" / "current" / "0000000000000001.txn").write_bytes(b"x")
    with pytest.raises(LayoutError, match="holds bookie data but no cookie"):
        check_or_stamp(conf)


def test_bookieformat_needs_force_to_wipe(tmp_path):
    conf = _conf(tmp_path)
    check_or_stamp(conf)
    with pytest.raises(LayoutError, match="pass --force to wipe"):
        format_bookie(conf, force=False)
    assert (tmp_path / "j" / "current").exists()
    assert str(tmp_path / "j") in format_bookie(conf, force=True)
    assert not (tmp_path / "j" / "current").exists()


def _bookie(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_reports_bad_configuration_in_one_line(tmp_path):
    r = _bookie("run", "--set", "bookiePort=abc")
    assert r.returncode == 2 and r.stderr.strip() == "bookie run: bookiePort: 'abc' is not an integer"
    r = _bookie("run", "--conf", str(tmp_path / "missing.conf"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_a_bookie_whose_disks_changed_refuses_to_start(tmp_path):
    from bookie.testing import LocalBookies

    with LocalBookies(1, base_dir=str(tmp_path / "ens")) as ens:
        ens.stop(0)
        # Wipe the bookie's disks behind its back: the store still holds the old cookie.
        conf = BookieConfig.from_mapping(ens.overrides(0))
        for d in (conf.journal_dir, *conf.ledger_dirs):
            import shutil
            shutil.rmtree(os.path.join(d, "current"))
        with pytest.raises(Exception, match="metadata store holds another cookie"):
            ens.start(0)
        # bookieformat removes the stored cookie too: then the bookie starts afresh.
        assert format_bookie(conf, force=True)
        ens.start(0)
