"""``bookie shell whatif`` and ``GET /api/v1/bookie/safe_to_stop`` over real bookies: a healthy
cluster is safe; a ledger whose other copies are down loses its last copy; a rack holding a
whole write set makes it unreadable; exit 0 / 1, and 2 only for a wrong question; the HTTP path
needs the admin token."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys

import pytest

from bookie.appliance.shell.security import gentoken
from bookie.appliance.shell.whatif import warn_before_stopping
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata, LedgerState
from bookie.testing import LocalBookies


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    d = tmp_path_factory.mktemp("whatif")
    token_file = str(d / "admin.token")
    gentoken(token_file)
    with open(token_file, "rb") as f:
        token = f.read().strip().decode()
    conf = {"httpServerAuthTokenFile": token_file}
    with LocalBookies(4, base_dir=str(d / "e"), conf=conf, admin_http=True) as e:
        e.token = token
        yield e


def whatif(ens, *argv: str) -> tuple[int, dict | str]:
    proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "whatif", *argv,
                           "--metadata", ens.metadata_uri, "--json"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == 2:
        return 2, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def closed_ledger(ens, ensemble: list[str], qw: int, qa: int) -> int:
    with open_metadata(ens.metadata_uri) as store:
        lid, _ = store.create_ledger(LedgerMetadata(
            len(ensemble), qw, qa, state=LedgerState.CLOSED, last_entry_id=9,
            fragments=[(0, list(ensemble))]))
    return lid


def delete(ens, *ids: int) -> None:
    with BookKeeper(ens.metadata_uri) as bk:
        for lid in ids:
            bk.delete_ledger(lid)


def test_a_healthy_cluster_with_spare_copies_is_safe_to_stop_one_bookie(ens):
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"w")
        for i in range(5):
            lh.add_entry(b"e%d" % i)
        lh.close()
    try:
        with open_metadata(ens.metadata_uri) as store:
            ensemble = store.read_ledger(lh.ledger_id)[0].fragments[0][1]
        rc, verdict = whatif(ens, ensemble[0])
        assert rc == 0 and verdict["safe"], verdict
        rc, verdict = whatif(ens, *ensemble[:2])  # two of a write set of three: below Qa
        assert rc == 1 and lh.ledger_id in verdict["below_ack_quorum"], verdict
    finally:
        delete(ens, lh.ledger_id)


def test_a_ledger_whose_other_copies_are_down_would_lose_its_last_copy(ens, capsys):
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(2, 2, 2, password=b"w")
        for i in range(5):
            lh.add_entry(b"e%d" % i)
        lh.close()
        with open_metadata(ens.metadata_uri) as store:
            ensemble = store.read_ledger(lh.ledger_id)[0].fragments[0][1]
    keep, other = ensemble
    down = ens.bookies.index(other)
    ens.stop(down)
    try:
        rc, verdict = whatif(ens, keep)
        assert rc == 1, verdict
        assert verdict["last_copy"] == [lh.ledger_id], verdict
        assert lh.ledger_id in verdict["unreadable"] and other in verdict["down"], verdict
        proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "whatif", keep,
                               "--metadata", ens.metadata_uri], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 1
        assert f"would lose their last live copy: {lh.ledger_id}" in proc.stdout, proc.stdout
        # no bookie named, with a bookie's --conf (the package's prerm): that bookie
        conf_file = ens.base_dir + "/keep.conf"
        with open(conf_file, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in ens.overrides(ens.bookies.index(keep)).items())
        proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "whatif", "--conf",
                               conf_file, "--json"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert json.loads(proc.stdout)["last_copy"] == [lh.ledger_id], proc.stdout
        with open_metadata(ens.metadata_uri) as store:  # decommissionbookie's warning
            warn_before_stopping(store, keep)
        warned = capsys.readouterr().err
        assert "warning" in warned and str(lh.ledger_id) in warned, warned
    finally:
        ens.start(down)
        delete(ens, lh.ledger_id)


def test_a_rack_holding_a_whole_write_set_makes_it_unreadable(ens):
    for b in ens.bookies[:2]:
        subprocess.run([sys.executable, "-m", "bookie", "shell", "setrack", b, "/dc/r1",
                        "--metadata", ens.metadata_uri], check=True, capture_output=True,
                       timeout=120)
    spread = closed_ledger(ens, [ens.bookies[0], ens.bookies[2]], 2, 2)
    whole = closed_ledger(ens, ens.bookies[:2], 2, 1)
    try:
        rc, verdict = whatif(ens, "--rack", "/dc/r1")
        assert rc == 1, verdict
        assert sorted(verdict["bookies"]) == sorted(ens.bookies[:2]), verdict
        assert verdict["last_copy"] == [whole] and verdict["unreadable"] == [whole], verdict
        assert verdict["below_ack_quorum"] == [spread, whole], verdict
        rc, verdict = whatif(ens, "--rack", "/dc/r9")  # no bookie there: nothing changes
        assert rc == 0 and verdict["safe"], verdict
    finally:
        delete(ens, spread, whole)


def test_usage_errors_alone_get_exit_status_2(ens):
    rc, err = whatif(ens)
    assert rc == 2 and "name at least one bookie" in err, err
    rc, err = whatif(ens, "not a bookie id!")
    assert rc == 2 and err.count("\n") == 1, err
    rc, verdict = whatif(ens, "127.0.0.1:1", "bk-unknown")  # valid ids, in no ensemble
    assert rc == 0 and verdict["safe"], verdict


def _get(ens, path: str, token: str | None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        raw = r.read()
        return r.status, json.loads(raw) if raw.startswith(b"{") else {}
    finally:
        conn.close()


def test_safe_to_stop_over_http_needs_the_token_and_answers_as_whatif(ens):
    whole = closed_ledger(ens, ens.bookies[2:4], 2, 2)
    try:
        path = f"/api/v1/bookie/safe_to_stop?bookies={ens.bookies[2]},{ens.bookies[3]}"
        status, _ = _get(ens, path, None)
        assert status == 401
        status, doc = _get(ens, path, ens.token)
        assert status == 200 and doc["safe"] is False and doc["last_copy"] == [whole], doc
        status, doc = _get(ens, f"/api/v1/bookie/safe_to_stop?bookies={ens.bookies[0]}",
                           ens.token)
        assert status == 200, doc
        status, doc = _get(ens, "/api/v1/bookie/safe_to_stop", ens.token)
        assert status == 400, doc
    finally:
        delete(ens, whole)
