"""The storage verbs of ``bookie shell`` over a real bookie's files, beside the running bookie:
readjournal, readlog, lastmark, listfilesondisc, readledger (both modes) and
localconsistencycheck.  Human output by default, JSON with --json, one line and exit status 2
for a mistake."""

import os
import random
import shutil

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.testing import LocalBookies

PASSWORD = b"tools"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One bookie holding a closed ledger and a fenced (recovered) one, both written through
    the client with CRC32C digests."""
    rng = random.Random(7)
    base = str(tmp_path_factory.mktemp("tools"))
    with LocalBookies(1, base_dir=base, conf={"flushInterval": 50, "logSizeLimit": 65536}) as ens, \
            BookKeeper(ens.metadata_uri) as bk:
        data = {}
        for n in (120, 30):
            lh = bk.create_ledger(1, 1, 1, digest="crc32c", password=PASSWORD)
            data[lh.ledger_id] = [rng.randbytes(rng.randrange(1, 1500)) for _ in range(n)]
            for d in data[lh.ledger_id]:
                lh.add_entry(d)
            if n == 120:
                lh.close()
        fenced = lh.ledger_id
        bk.open_ledger(fenced, digest="crc32c", password=PASSWORD)  # recovery fences it
        yield ens, data, fenced


def run(capsys, ens, *argv, rc=0, conf=True):
    args = ["shell", *argv]
    if conf:
        for k, v in ens.overrides(0).items():
            args += ["--set", f"{k}={v}"]
    got = main(args)
    out, err = capsys.readouterr()
    assert got == rc, err
    if rc == 2:
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return out, err


def test_lastmark_and_listfilesondisc(capsys, written, tmp_path):
    ens, _, _ = written
    out, _ = run(capsys, ens, "lastmark")
    assert "LastLogMark" in out
    doc = orjson.loads(run(capsys, ens, "lastmark", "--json")[0])
    assert doc["replay_from"] > 0 and doc["journal_file"].endswith(".txn")
    doc = orjson.loads(run(capsys, ens, "listfilesondisc", "--json")[0])
    assert doc["journal"] and all(f["path"].endswith(".txn") for f in doc["journal"])
    assert len(doc["entrylog"]) > 1 and all(f["size"] > 0 for f in doc["entrylog"])
    assert any(f["path"].endswith("data.mdb") for f in doc["index"])
    out, _ = run(capsys, ens, "listfilesondisc", "--entrylog")
    assert out.startswith("entrylog (") and "journal" not in out
    wrong = {**ens.overrides(0), "ledgerDirectories": str(tmp_path)}
    _, err = run(capsys, ens, "lastmark", *[a for k, v in wrong.items() for a in ("--set", f"{k}={v}")],
                 rc=2, conf=False)
    assert "holds no bookie data" in err


def test_readjournal_dumps_the_adds_and_the_fence(capsys, written):
    ens, data, fenced = written
    doc = orjson.loads(run(capsys, ens, "readjournal", "--json", "--entries")[0])
    adds = [r for r in doc["records"] if r["type"] == "ADD"]
    assert {r["ledger_id"] for r in adds} == set(data)
    stored = {(r["ledger_id"], e) for r in adds if not r["recovery"] for e in r["entry_ids"]}
    assert stored == {(lid, e) for lid, payloads in data.items() for e in range(len(payloads))}
    assert any(r["type"] == "FENCE" and r["ledger_id"] == fenced for r in doc["records"])
    assert adds[0]["entry_ids"] == [0]
    out, _ = run(capsys, ens, "readjournal", "--limit", "3")
    assert len(out.splitlines()) == 3 and ": ADD ledger" in out
    one = orjson.loads(run(capsys, ens, "readjournal", "--json", "--ledger-id", str(fenced))[0])
    assert one["records"] and {r["ledger_id"] for r in one["records"]} == {fenced}
    assert len(orjson.loads(run(capsys, ens, "readjournal", "--json", "--limit", "2")[0])["records"]) == 2
    run(capsys, ens, "readjournal", "/etc/hostname", rc=2)
    run(capsys, ens, "readjournal", "ffff", rc=2)


def test_readlog_dumps_a_log_and_one_entry_in_it(capsys, written):
    ens, data, _ = written
    files = orjson.loads(run(capsys, ens, "listfilesondisc", "--entrylog", "--json")[0])["entrylog"]
    first = files[0]["path"]
    doc = orjson.loads(run(capsys, ens, "readlog", first, "--json")[0])
    assert doc["stopped_at"] in ("zeros", "end of file") and doc["entries"] > 0
    e = doc["entries_found"][0]
    out, _ = run(capsys, ens, "readlog", os.path.basename(first)[:8], "--ledger-id",
                 str(e["ledger_id"]), "--entry-id", str(e["entry_id"]), "--data")
    assert out.startswith(f"ledger {e['ledger_id']} entry {e['entry_id']} at {e['offset']}")
    one = orjson.loads(run(capsys, ens, "readlog", first, "--json", "--data", "--ledger-id",
                           str(e["ledger_id"]), "--entry-id", str(e["entry_id"]))[0])
    payload = bytes.fromhex(one["entries_found"][0]["data_hex"])[8:]  # after the CRC32C digest
    assert payload == data[e["ledger_id"]][e["entry_id"]]
    run(capsys, ens, "readlog", first, "--ledger-id", "999999", rc=2)
    lastmark = os.path.join(ens.bookie_dir(0), "ledgers", "current", "lastMark")
    _, err = run(capsys, ens, "readlog", lastmark, rc=2)
    assert "not an entry log" in err
    run(capsys, ens, "readlog", "7fffffff", rc=2)


def test_readledger_from_storage_and_through_the_client_agree(capsys, written):
    ens, data, fenced = written
    for lid, payloads in data.items():
        local = orjson.loads(run(capsys, ens, "readledger", str(lid), "--json")[0])["entries"]
        assert [bytes.fromhex(e["data_hex"]) for e in local] == payloads
    lid = min(data)
    remote = orjson.loads(run(capsys, ens, "readledger", str(lid), "--json", "--metadata",
                              ens.metadata_uri, "--password", PASSWORD.decode(),
                              "--entry-from", "5", "--entry-to", "9", conf=False)[0])["entries"]
    assert [bytes.fromhex(e["data_hex"]) for e in remote] == data[lid][5:10]
    out, _ = run(capsys, ens, "readledger", str(lid), "--entry-from", "5", "--entry-to", "6")
    assert out.splitlines()[0].startswith(f"ledger {lid} entry 5: ")
    run(capsys, ens, "readledger", "424242", rc=2)
    run(capsys, ens, "readledger", "424242", "--metadata", ens.metadata_uri, rc=2, conf=False)
    _, err = run(capsys, ens, "readledger", str(lid), rc=2, conf=False)
    assert "--conf FILE" in err and "--metadata URI" in err


def test_localconsistencycheck_passes_then_finds_a_flipped_byte(capsys, written, tmp_path):
    ens, data, _ = written
    out, _ = run(capsys, ens, "localconsistencycheck")
    assert out.startswith("OK: 150 entries of 2 ledgers checked, 150 digests passed")
    # A copy of the bookie's directories with one payload byte flipped in an entry log.
    copy = str(tmp_path / "copy")
    shutil.copytree(ens.bookie_dir(0), copy, ignore=shutil.ignore_patterns("bookie.lock"))
    overrides = {**ens.overrides(0), "journalDirectory": os.path.join(copy, "journal"),
                 "ledgerDirectories": os.path.join(copy, "ledgers")}
    sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    logs = orjson.loads(run(capsys, ens, "listfilesondisc", "--entrylog", "--json", *sets,
                            conf=False)[0])["entrylog"]
    found = orjson.loads(run(capsys, ens, "readlog", logs[-1]["path"], "--json", *sets,
                             conf=False)[0])["entries_found"][-1]
    with open(logs[-1]["path"], "r+b") as f:
        f.seek(found["offset"] + found["length"] - 1)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    out, _ = run(capsys, ens, "localconsistencycheck", *sets, rc=1, conf=False)
    assert f"ledger {found['ledger_id']} entry {found['entry_id']}: digest mismatch" in out
    assert "INCONSISTENT" in out
    doc = orjson.loads(run(capsys, ens, "localconsistencycheck", "--json", *sets, rc=1,
                           conf=False)[0])
    assert doc["ok"] is False and doc["problem_count"] == 1
