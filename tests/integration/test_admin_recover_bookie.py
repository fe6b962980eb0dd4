"""``PUT /api/v1/autorecovery/bookie`` (BookKeeper's path): a stopped bookie's fragments are
copied to the others in the background and the ledger's metadata stops naming it; a body that
is not BookKeeper's shape is a 400; without the admin token it is a 403 (it changes state)."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from bookie.appliance.shell.security import gentoken
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies


def put(ens, body: bytes, token: bool = True) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=30)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {ens.token}"
    try:
        conn.request("PUT", "/api/v1/autorecovery/bookie", body=body, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    d = tmp_path_factory.mktemp("rb")
    token_file = str(d / "admin.token")
    gentoken(token_file)
    with LocalBookies(3, base_dir=str(d / "e"), admin_http=True,
                      conf={"httpServerAuthTokenFile": token_file}) as e:
        with open(token_file) as f:
            e.token = f.read().strip()
        yield e


def test_without_the_token_it_is_refused(ens):
    status, doc = put(ens, json.dumps({"bookie_src": [ens.bookies[1]]}).encode(), token=False)
    assert status == 401, doc


def test_recover_bookie_moves_a_stopped_bookies_fragments_elsewhere(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(2, 2, 2, password=b"rb")
        for i in range(5):
            lh.add_entry(b"e%d" % i)
        lh.close()
    with open_metadata(ens.metadata_uri) as store:
        ensemble = store.read_ledger(lh.ledger_id)[0].fragments[0][1]
    gone = next(b for b in ensemble if b != ens.bookies[0])  # bookie 0 serves the API
    ens.stop(ens.bookies.index(gone))
    status, doc = put(ens, json.dumps({"bookie_src": [gone]}).encode())
    assert status == 200 and doc["recovering"] == [gone], doc
    deadline = time.monotonic() + 90
    while True:
        with open_metadata(ens.metadata_uri) as store:
            meta = store.read_ledger(lh.ledger_id)[0]
        if all(gone not in e for _, e in meta.fragments):
            break
        assert time.monotonic() < deadline, (meta.fragments, ens.log(0)[-3000:])
        time.sleep(0.5)
    with BookKeeper(ens.metadata_uri) as bk:
        rh = bk.open_ledger(lh.ledger_id, password=b"rb")
        assert [e.data for e in rh.read_entries(0, 4)] == [b"e%d" % i for i in range(5)]


@pytest.mark.parametrize("body", [b"{}", b'{"bookie_src": "x:1"}', b'{"bookie_src": ["a b"]}',
                                  b'{"bookie_src": ["x:1"], "bookie_dest": ["y:1"]}',
                                  b'{"bookie_src": ["x:1"], "delete_cookie": "yes"}'])
def test_a_body_not_of_bookkeepers_shape_is_a_400(ens, body):
    status, doc = put(ens, body)
    assert status == 400, doc


def test_a_bookie_id_the_cluster_does_not_know_is_a_404_not_a_recovery(ens):
    status, doc = put(ens, b'{"bookie_src": ["127.0.0.9:3181"]}')
    assert status == 404 and "no bookie 127.0.0.9:3181 in this cluster" in doc["error"], doc
