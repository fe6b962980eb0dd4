"""``bookie shell whatif`` and ``GET /api/v1/bookie/safe_to_stop`` over real bookies: a healthy
cluster is safe; a ledger whose other copies are down loses its last copy; a rack holding a
whole write set makes it unreadable; a rolling restart's reduced redundancy is a warning, exit 0
(``--strict``: 1); exit 2 for a wrong question, and a bookie id or rack the cluster does not
know is one (issue 44), for every verb that takes one; the HTTP path needs the admin token."""

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
        assert rc == 0 and lh.ledger_id in verdict["reduced_redundancy"], verdict
        rc, verdict = whatif(ens, "--strict", *ensemble[:2])
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
        rc, err = whatif(ens, "--rack", "/dc/r9")  # no bookie there: a wrong question
        assert rc == 2 and "no bookie of this cluster is in rack /dc/r9" in err, err
    finally:
        delete(ens, spread, whole)


def test_usage_errors_alone_get_exit_status_2(ens):
    rc, err = whatif(ens)
    assert rc == 2 and "name at least one bookie" in err, err
    rc, err = whatif(ens, "not a bookie id!")
    assert rc == 2 and err.count("\n") == 1, err
    rc, err = whatif(ens, "127.0.0.1:1", "bk-unknown")  # well-formed ids the cluster never knew
    assert rc == 2 and "no bookies 127.0.0.1:1, bk-unknown in this cluster" in err, err
    assert err.count("\n") == 1, err


def test_a_rolling_restart_with_reduced_redundancy_alone_is_safe_with_a_warning(ens):
    """Qw = Qa: any single stop leaves each entry below its ack quorum but readable; a rolling
    restart gated on whatif must be able to run (issue 39)."""
    closed = closed_ledger(ens, ens.bookies[:3], 2, 2)
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"w")  # open, with a fourth bookie to move to
        lh.add_entry(b"e")
        try:
            with open_metadata(ens.metadata_uri) as store:
                stop = store.read_ledger(lh.ledger_id)[0].fragments[0][1][0]
            proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "whatif", stop,
                                   "--metadata", ens.metadata_uri], capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "warning: reduced redundancy" in proc.stdout, proc.stdout
            assert str(lh.ledger_id) in proc.stdout, proc.stdout
            rc, verdict = whatif(ens, stop)
            assert rc == 0 and lh.ledger_id in verdict["reduced_redundancy"], verdict
            assert verdict["stalled"] == [] and verdict["strict"] is False, verdict
            rc, verdict = whatif(ens, "--strict", stop)
            assert rc == 1 and lh.ledger_id in verdict["below_ack_quorum"], verdict
            status, doc = _get(ens, f"/api/v1/bookie/safe_to_stop?bookies={stop}", ens.token)
            assert status == 200 and doc["safe"] is True, doc
            status, doc = _get(ens, f"/api/v1/bookie/safe_to_stop?bookies={stop}&strict=true",
                               ens.token)
            assert status == 200 and doc["safe"] is False, doc
        finally:
            lh.close()
    delete(ens, closed, lh.ledger_id)


def test_an_id_named_only_by_a_ledger_is_known(ens):
    """A renamed bookie's old id lives on in the ledgers until updateledgers: not refused."""
    old = closed_ledger(ens, ["bk-renamed-away", ens.bookies[0]], 2, 1)
    try:
        rc, verdict = whatif(ens, "bk-renamed-away")
        assert rc == 0 and verdict["bookies"] == ["bk-renamed-away"], verdict
    finally:
        delete(ens, old)


def shell(ens, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", "shell", *argv,
                           "--metadata", ens.metadata_uri], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv", [
    ("decommissionbookie", "127.0.0.9:3181"),
    ("recover", "127.0.0.9:3181"),
    ("listunderreplicated", "--missing-replica", "127.0.0.9:3181"),
    ("bookiesanity", "--bookie", "127.0.0.9:3181"),
    ("setrack", "127.0.0.9:3181", "/dc/r1"),
])
def test_every_verb_refuses_a_bookie_id_the_cluster_does_not_know(ens, argv):
    proc = shell(ens, *argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "no bookie 127.0.0.9:3181 in this cluster" in \
        proc.stderr, proc.stderr
    assert "cookie is removed" not in proc.stdout, proc.stdout


def test_ledgermetadata_of_no_ledger_is_not_found_like_the_other_lookups(ens):
    proc = shell(ens, "ledgermetadata", str(10 ** 12))
    assert proc.returncode == 1 and f"no ledger {10 ** 12}" in proc.stderr, proc.stderr


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
        status, doc = _get(ens, "/api/v1/bookie/safe_to_stop?bookies=127.0.0.9:3181", ens.token)
        assert status == 404, doc
        status, doc = _get(ens, "/api/v1/bookie/safe_to_stop?rack=/nowhere", ens.token)
        assert status == 404, doc
    finally:
        delete(ens, whole)
