"""Configuration keys read through typed accessors: the unit conversion happens once, in the table."""

import pytest

from bookie.workers.config import KEYS, BookieConfig, Key


def test_accessors_convert_the_written_unit_to_seconds_or_bytes(tmp_path):
    conf = BookieConfig.from_mapping({
        "journalDirectory": str(tmp_path), "ledgerDirectories": str(tmp_path),
        "flushInterval": "250", "journalRingSizeMB": "3", "journalWriteBufferSizeKB": "2",
        "journalMaxGroupWaitMSec": "0", "logSizeLimit": "8192", "bookiePort": "4000"})
    assert conf.flush_interval_s == 0.25
    assert conf.ring_size_bytes == 3 << 20
    assert conf.journal_write_buffer_size_bytes == 2048
    assert conf.journal_max_group_wait_s == 0
    assert conf.log_size_limit_bytes == 8192
    assert conf.bookie_port == 4000 and conf.value("bookiePort") == 4000
    assert conf.index_dirs == [str(tmp_path)]


def test_every_key_has_an_accessor_named_with_its_unit():
    attrs = [k.attr for k in KEYS]
    assert all(attrs) and len(set(attrs)) == len(attrs)
    for key in KEYS:
        assert isinstance(getattr(BookieConfig, key.attr), property)


def test_a_key_whose_accessor_hides_its_unit_is_refused():
    with pytest.raises(ValueError, match="must end in _s"):
        Key("someWaitMs", "int", 1, "a wait", unit="ms", attr="some_wait")


def test_no_attribute_access_by_bookkeeper_name(tmp_path):
    conf = BookieConfig.from_mapping({"journalDirectory": str(tmp_path),
                                      "ledgerDirectories": str(tmp_path)})
    with pytest.raises(AttributeError):
        conf.flushInterval
