"""One list of metadata URI schemes (issue 44 item 4b): ``metadata/uri.py`` ``SCHEMES``, used by
the URI parser, the bookie's ``metadataServiceUri`` check and the client's, each naming the
same schemes when it refuses one (before, each held its own hand-written list)."""

from __future__ import annotations

import pytest

from bookie.client.config import ClientConfig
from bookie.client.errors import InvalidArgumentError
from bookie.metadata.errors import InvalidUriError
from bookie.metadata.uri import SCHEMES, SCHEMES_HELP, known_scheme, parse_uri
from bookie.workers import config as bookie_config

EXAMPLES = {"zk": "zk://127.0.0.1:2181/ledgers", "zk+flat": "zk+flat://127.0.0.1:2181/l",
            "zk+hierarchical": "zk+hierarchical://127.0.0.1:2181/l", "lmdb": "lmdb:///var/m"}


def test_every_scheme_is_taken_by_the_parser_the_bookie_and_the_client():
    assert set(SCHEMES) == set(EXAMPLES)
    for scheme, uri in EXAMPLES.items():
        assert known_scheme(uri) and parse_uri(uri).scheme == scheme.split("+")[0]
        assert bookie_config._uri(uri) is None
        ClientConfig(metadataServiceUri=uri).check()


@pytest.mark.parametrize("uri", ["zk+foo://h:1/r", "etcd://h:2379/l", "lmdb", "zk:/h:1"])
def test_any_other_is_refused_by_each_with_the_same_list(uri):
    assert not known_scheme(uri)
    assert bookie_config._uri(uri) == f"must be {SCHEMES_HELP}"
    with pytest.raises(InvalidArgumentError, match="zk\\+hierarchical://"):
        ClientConfig(metadataServiceUri=uri).check()
    with pytest.raises(InvalidUriError):
        parse_uri(uri)
