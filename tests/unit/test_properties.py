"""One properties parser and one boolean vocabulary for every configuration surface
(bookie.properties): the bookie's file and --set, the client's keys from every source, the Spark
format's options, the admin API's flags and the test fixtures read a value the same way."""

from __future__ import annotations

import pytest

from bookie.appliance.admin import HttpError, Request
from bookie.client.config import ClientConfig
from bookie.client.errors import InvalidArgumentError
from bookie.client.options import client_keys
from bookie.properties import (FALSE_WORDS, TRUE_WORDS, PropertiesError, parse_assignments,
                               parse_bool, parse_int, parse_properties)
from bookie.spark.options import OptionError, ReadOptions, SinkOptions
from bookie.testing.client_fixtures import FixtureOptionError, merge_options
from bookie.workers.config import BookieConfig, ConfigError

TRUE_SPELLINGS = ["true", "TRUE", " True ", "yes", "on", "1", True]
FALSE_SPELLINGS = ["false", "FALSE", " False", "no", "off", "0", False]
NOT_BOOLEANS = ["flase", "", "2", "enabled", None, 1]


@pytest.mark.parametrize("text", TRUE_SPELLINGS)
def test_every_true_spelling_is_true(text):
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", FALSE_SPELLINGS)
def test_every_false_spelling_is_false(text):
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", NOT_BOOLEANS)
def test_anything_else_is_refused_naming_it(text):
    with pytest.raises(PropertiesError, match="is not true or false"):
        parse_bool(text)


def test_the_vocabulary_is_closed_and_disjoint():
    assert TRUE_WORDS == {"true", "yes", "on", "1"}
    assert FALSE_WORDS == {"false", "no", "off", "0"}


def test_integers_take_underscores_and_refuse_booleans():
    assert parse_int("65_536") == 65536
    with pytest.raises(PropertiesError):
        parse_int(True)


def test_properties_text_and_assignments():
    text = "# comment\n! also\n\na=1\nb : two words \nc=x=y\n"
    assert parse_properties(text, "f") == {"a": "1", "b": "two words", "c": "x=y"}
    with pytest.raises(PropertiesError, match=r"^f:2: expected key=value"):
        parse_properties("a=1\nnope\n", "f")
    assert parse_assignments(["a=1", "b= 2"]) == {"a": "1", "b": " 2"}
    with pytest.raises(PropertiesError, match="expected KEY=VALUE"):
        parse_assignments(["a"])


def _bookie(flag: str) -> bool:
    conf = BookieConfig.from_mapping({"ledgerDirectories": "/x", "readOnlyModeEnabled": flag},
                                     check_dirs=False)
    return conf.read_only_mode_enabled


def _client(flag: str) -> bool:
    return ClientConfig.build({"allowEmptyPassword": flag}).allowEmptyPassword


def _client_set(flag: str) -> bool:
    return client_keys(None, [f"allowEmptyPassword={flag}"])["allowEmptyPassword"]


def _spark(flag: str) -> bool:
    opts = SinkOptions.parse({"metadataServiceUri": "lmdb:///m", "log": "l",
                              "bookkeeper.allowEmptyPassword": flag})
    return ClientConfig.build(dict(opts.conn.config)).allowEmptyPassword


def _spark_flag(flag: str) -> bool:
    return ReadOptions.parse({"metadataServiceUri": "lmdb:///m", "ledgers": "1",
                              "includeMetadata": flag}, stream=False).include_metadata


def _admin(flag: str) -> bool:
    return Request("GET", "/", {"print_metadata": [flag]}, b"").bool_param("print_metadata")


def _fixture(flag: str) -> bool:
    opts = merge_options([("test", {"client_config": {"allowEmptyPassword": flag}})])
    return ClientConfig.build(opts["client_config"]).allowEmptyPassword


SURFACES = {"bookie": (_bookie, ConfigError), "client": (_client, InvalidArgumentError),
            "client --set": (_client_set, InvalidArgumentError),
            "spark bookkeeper.*": (_spark, OptionError), "spark flag": (_spark_flag, OptionError),
            "admin": (_admin, HttpError), "fixtures": (_fixture, FixtureOptionError)}


@pytest.mark.parametrize("surface", SURFACES)
def test_every_surface_reads_booleans_by_the_same_vocabulary(surface):
    read, error = SURFACES[surface]
    for text in ("true", "yes", "on", "1", "TRUE"):
        assert read(text) is True, (surface, text)
    for text in ("false", "no", "off", "0", "False"):
        assert read(text) is False, (surface, text)
    with pytest.raises(error, match="true or false"):
        read("flase")


def test_spark_allow_empty_password_false_arrives_as_false_not_the_string():
    opts = SinkOptions.parse({"metadataServiceUri": "lmdb:///m", "log": "l",
                              "bookkeeper.allowEmptyPassword": "false"})
    assert dict(opts.conn.config) == {"allowEmptyPassword": False}
