"""BookKeeper's shell spellings and verbs, as BookKeeper writes them, against a real bookie, a
real embedded store and a real ZooKeeper (``;`` between hosts): listbookies -rw/-ro/-a,
listledgers -m, ledgermetadata/readledger -ledgerid, bookieformat -nonInteractive -force,
listunderreplicated -printmissingreplica, lostbookierecoverydelay -get/-set (and the auditor
using it), cookie_list/cookie_get/cookie_delete, activeledgers -logId, readlogmetadata, ledger,
endpointinfo -b, whatisinstanceid, queryautorecoverystatus, initnewcluster,
nukeexistingcluster, initbookie, expandstorage; metaformat -force asks on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.autorecovery.auditor import Auditor
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

PASSWORD = b"verbs"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["shell", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One running bookie holding a closed ledger of 30 entries; yields (ens, ledger_id)."""
    ens = LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("verbs")))
    ens.start_all()
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(30):
            lh.add_entry(b"verb %d" % i)
        lh.close()
    yield ens, lh.ledger_id
    ens.close()


def conf_file(tmp_path, overrides: dict) -> str:
    path = tmp_path / "bookie.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in overrides.items()))
    return str(path)


def test_listing_verbs_in_bookkeepers_spelling(capsys, written):
    ens, ledger_id = written
    uri, bookie = ens.metadata_uri, ens.bookies[0]
    line = f"{bookie} address={bookie} location=/default-region/default-rack\n"
    assert run(capsys, "listbookies", "-rw", "--metadata", uri)[1] == line
    assert run(capsys, "listbookies", "-ro", "--metadata", uri)[1] == "no read-only bookies registered\n"
    assert run(capsys, "listbookies", "-a", "--metadata", uri)[1] == line
    rc, out, _ = run(capsys, "listledgers", "-m", "--metadata", uri)
    assert rc == 0 and f"ledger {ledger_id} (metadata version" in out and "CLOSED" in out
    rc, out, _ = run(capsys, "ledgermetadata", "-ledgerid", str(ledger_id), "--metadata", uri)
    assert rc == 0 and "last entry:     29" in out
    rc, out, _ = run(capsys, "readledger", "-ledgerid", str(ledger_id), "--metadata", uri,
                     "--password", PASSWORD.decode())
    assert rc == 0 and out.count("\n") == 30, out
    rc, out, _ = run(capsys, "listunderreplicated", "-printmissingreplica", "--metadata", uri)
    assert rc == 0 and "no ledger is marked under-replicated" in out
    rc, out, _ = run(capsys, "whatisinstanceid", "--metadata", uri)
    with open_metadata(uri) as store:
        assert rc == 0 and out.strip() == store.instance_id()
    rc, out, _ = run(capsys, "endpointinfo", "-b", bookie, "--metadata", uri)
    port = int(bookie.rsplit(":", 1)[1])
    assert rc == 0 and f"adds:  tcp://127.0.0.1:{port}" in out and f":{port + 1}" in out
    rc, _, err = run(capsys, "endpointinfo", "-b", "127.0.0.1:1", "--metadata", uri)
    assert rc == 1 and "not registered" in err
    rc, out, _ = run(capsys, "queryautorecoverystatus", "--metadata", uri)
    assert rc == 0 and "no ledger is being re-replicated" in out


def test_cookie_verbs(capsys, written):
    ens, _ = written
    uri, bookie = ens.metadata_uri, ens.bookies[0]
    assert run(capsys, "cookie_list", "--metadata", uri)[1] == f"{bookie}\n"
    rc, out, _ = run(capsys, "cookie_get", bookie, "--metadata", uri)
    assert rc == 0 and f"bookie_id: {bookie}" in out and "instance_id" in out
    rc, _, err = run(capsys, "cookie_get", "127.0.0.1:1", "--metadata", uri)
    assert rc == 1 and "no cookie of 127.0.0.1:1" in err
    rc, _, err = run(capsys, "cookie_delete", bookie, "-force", "--metadata", uri)
    assert rc == 2 and "registered (running)" in err  # a running bookie keeps its cookie


def test_local_storage_verbs(capsys, written, tmp_path):
    ens, ledger_id = written
    conf = conf_file(tmp_path, ens.overrides(0))
    ledgers_dir = os.path.join(ens.bookie_dir(0), "ledgers", "current")
    log_id = min(int(n[:-4], 16) for n in os.listdir(ledgers_dir) if n.endswith(".log"))
    rc, out, _ = run(capsys, "readlogmetadata", "-logId", f"{log_id:x}", "--conf", conf)
    assert rc == 0 and f"ledger {ledger_id}: 30 entries" in out, out
    rc, out, _ = run(capsys, "activeledgers", "-logId", f"{log_id:x}", "--conf", conf)
    assert rc == 0 and str(ledger_id) in out.split(), out
    rc, out, _ = run(capsys, "ledger", "-ledgerid", str(ledger_id), "-m", "--conf", conf)
    assert rc == 0 and out.count("entry log") == 30 and "(held)" in out, out


def test_lostbookierecoverydelay_is_set_for_every_auditor(capsys, written):
    ens, _ = written
    uri = ens.metadata_uri
    rc, out, _ = run(capsys, "lostbookierecoverydelay", "-get", "--metadata", uri)
    assert rc == 0 and "not set in the store" in out
    with open_metadata(uri) as store:
        auditor = Auditor(store, delay_s=3600)
        auditor.tick()
        assert auditor.membership.delay_s == 3600
        rc, out, _ = run(capsys, "lostbookierecoverydelay", "-set", "7", "--metadata", uri)
        assert rc == 0 and "7 s" in out
        assert run(capsys, "lostbookierecoverydelay", "-get", "--metadata", uri)[1] == \
            "lostBookieRecoveryDelay: 7 s\n"
        auditor.tick()
        assert auditor.membership.delay_s == 7
    rc, _, err = run(capsys, "lostbookierecoverydelay", "-set", "-1", "--metadata", uri)
    assert rc == 2 and err.count("\n") == 1


def test_cluster_lifecycle_verbs_on_zookeeper_with_semicolons(capsys, zk_uri):
    hosts_and_root = zk_uri.split("://", 1)[1]
    host, root = hosts_and_root.split("/", 1)
    new_root = f"/{root}/fresh"
    uri = f"zk://{host};{host}{new_root}"  # BookKeeper's separator
    rc, out, err = run(capsys, "initnewcluster", "--metadata", uri)
    assert rc == 0 and "new cluster initialised" in out, err
    rc, _, err = run(capsys, "initnewcluster", "--metadata", uri)
    assert rc == 2 and "nukeexistingcluster" in err
    rc, instance, _ = run(capsys, "whatisinstanceid", "--metadata", uri)
    with open_metadata(uri.replace(";", ",")) as store:
        store.write_cookie("h1:3181", b"{}")
    rc, _, err = run(capsys, "nukeexistingcluster", "--metadata", uri)
    assert rc == 2 and "-instanceid" in err
    rc, _, err = run(capsys, "nukeexistingcluster", "-instanceid", "not-it", "--metadata", uri)
    assert rc == 2 and "nothing wiped" in err
    rc, out, _ = run(capsys, "nukeexistingcluster", "-instanceid", instance.strip(),
                     "--metadata", uri)
    assert rc == 0 and "wiped" in out
    assert run(capsys, "cookie_list", "--metadata", uri)[1] == "no cookies in the store\n"


def test_initbookie_then_expandstorage(capsys, tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    assert run(capsys, "metaformat", "--metadata", uri, "-nonInteractive")[0] == 0
    port = free_port_pair("127.0.0.1")
    overrides = {"bookiePort": port, "journalDirectory": tmp_path / "j",
                 "ledgerDirectories": tmp_path / "l1", "metadataServiceUri": uri}
    for d in ("j", "l1", "l2"):
        os.makedirs(tmp_path / d)
    conf = conf_file(tmp_path, overrides)
    rc, out, err = run(capsys, "initbookie", "--conf", conf)
    assert rc == 0 and "initialised" in out, err
    rc, _, err = run(capsys, "initbookie", "--conf", conf)
    assert rc == 2 and "hold bookie data already" in err
    rc, _, err = run(capsys, "expandstorage", "--conf", conf)
    assert rc == 2 and "names no new directory" in err
    conf = conf_file(tmp_path, {**overrides,
                                "ledgerDirectories": f"{tmp_path / 'l1'},{tmp_path / 'l2'}"})
    rc, out, err = run(capsys, "expandstorage", "--conf", conf)
    assert rc == 0 and "cookie updated" in out and "ledger_dirs" in out, err
    rc, out, _ = run(capsys, "cookie_get", f"127.0.0.1:{port}", "--metadata", uri)
    assert str(tmp_path / "l2") in out


def test_bookieformat_and_metaformat_take_bookkeepers_flags(capsys, tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    assert run(capsys, "metaformat", "-nonInteractive", "--metadata", uri)[0] == 0
    with open_metadata(uri) as store:
        store.write_cookie("h1:3181", b"{}")
    # -force on a terminal still asks (BookKeeper's rule); "n" keeps everything
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "bookie", "shell", "metaformat",
                                  "-force", "--metadata", uri])
    seen = b""
    while b"Wipe it?" not in seen:
        seen += os.read(fd, 1024)
    os.write(fd, b"n\n")
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1, seen
    assert b"nothing changed" in seen
    with open_metadata(uri) as store:
        assert store.read_cookie("h1:3181")
    # -nonInteractive -force wipes without asking
    assert run(capsys, "metaformat", "-nonInteractive", "-force", "--metadata", uri)[0] == 0
    journal, ledgers = tmp_path / "j", tmp_path / "l"
    os.makedirs(journal / "current")
    os.makedirs(ledgers)
    rc, out, err = run(capsys, "bookieformat", "-nonInteractive", "-force", "--set",
                       f"journalDirectory={journal}", "--set", f"ledgerDirectories={ledgers}",
                       "--set", "bookiePort=3181")
    assert rc == 0 and "wiped 1 directories" in out, err


def test_deleteledger_at_end_of_input_keeps_the_ledger(written):
    ens, ledger_id = written
    proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "deleteledger",
                           str(ledger_id), "--metadata", ens.metadata_uri],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"deleteledger: ledger {ledger_id} kept"
    with open_metadata(ens.metadata_uri) as store:
        assert store.read_ledger(ledger_id)
