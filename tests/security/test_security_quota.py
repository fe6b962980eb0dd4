"""One writer must not fill the ledger disks (issue 33 item 6): ``ledgerStorageQuotaBytes``.

Real bookie processes, real enrolment, the public client API:

- two enrolled writer keys: the one that passes its quota gets QuotaExceededError (OVER_QUOTA)
  on an add, for every ledger it writes on that bookie; the other keeps writing; once the
  over-quota writer's ledger is deleted and the bookie's GC deleted it, the writer writes
  again; a restart keeps the usage (an over-quota writer is still refused after it), and so
  does an index rebuild (the identities are kept beside the index); the
  metrics count the refusals and the identities over quota, with no per-writer label;
- without enrolment the quota goes by the ledger's owner over TCP: one ledger over it is
  refused, another ledger of the same client keeps writing; over the local sockets it goes by
  the client's uid (the kernel names it), every ledger of that uid counting together;
- RECOVERY_ADD is no way around it (issue 39 item 2): a writer's flood of recovery adds to its own
  open ledger is refused OVER_QUOTA and charged to its key (its next ledger is refused too),
  while the recovery principal (an admin key, the recovery credential) and a recovering
  reader's re-adds to a ledger the bookie holds fenced still go.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import zmq.auth

from bookie.client import BookKeeper, QuotaExceededError
from bookie.client.auth import ClientCurve
from bookie.client.digest import master_key
from bookie.metadata import open_metadata
from bookie.metadata.recovery_secret import credential, recovery_secret
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie import wire
from bookie.wire import Flag, Op, Status

QUOTA = 64 * 1024
ENTRY = b"q" * 4096
PASSWORD = b"quota-password"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("quota")
    made = {n: zmq.auth.create_certificates(str(root), n) for n in ("bookie", "alice", "bob", "ops")}
    enrol = root / "clients"
    for role in ("reader", "writer", "admin"):
        os.makedirs(enrol / role)
    for name in ("alice", "bob"):
        with open(made[name][0]) as src, open(enrol / "writer" / f"{name}.key", "w") as dst:
            dst.write(src.read())
    with open(made["ops"][0]) as src, open(enrol / "admin" / "ops.key", "w") as dst:
        dst.write(src.read())
    made["clients"] = str(enrol)
    return made


def fill(lh, limit: int = 64) -> int:
    """Add entries until the bookie refuses one for the quota; returns the entries added."""
    for i in range(limit):
        try:
            lh.add_entry(ENTRY)
        except QuotaExceededError as e:
            assert "OVER_QUOTA" in str(e) and "ledgerStorageQuotaBytes" in str(e)
            return i
    raise AssertionError(f"{limit} adds of {len(ENTRY)} bytes and no OVER_QUOTA")


def metrics(ens) -> dict[str, float]:
    """The quota metrics of bookie 0 (label-free: one sample each)."""
    found = {}
    with urllib.request.urlopen(f"{ens.admin_url(0)}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(("bookie_add_quota_refused_total", "bookie_quota_identities_over")):
                name, value = line.rsplit(" ", 1)
                assert "{" not in name, f"a quota metric with labels: {line}"
                found[name] = float(value)
    return found


def rebuild_index(ens) -> None:
    ens.stop(0)
    shutil.rmtree(os.path.join(ens.bookie_dir(0), "ledgers", "current", "index"))
    cmd = [sys.executable, "-m", "bookie", "shell", "rebuild-index"]
    for k, v in ens.overrides(0).items():
        cmd += ["--set", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ens.start(0)


def client(ens, keys, name):
    return BookKeeper(ens.metadata_uri, curveSecretKeyFile=keys[name][1],
                      curveServerKeys=keys["bookie"][0], addEntryTimeout=5)


def refused_first_add(bk) -> bool:
    lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
    try:
        lh.add_entry(ENTRY)
    except QuotaExceededError:
        return True
    lh.close()
    return False


def secure_conf(keys) -> dict:
    return {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": keys["clients"],
            "flushInterval": 50, "ledgerStorageQuotaBytes": QUOTA}


def test_an_enrolled_writer_over_quota_is_refused_and_others_keep_writing(keys, tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=secure_conf(keys),
                      admin_http=True) as ens:
        with client(ens, keys, "alice") as alice, client(ens, keys, "bob") as bob:
            first = alice.create_ledger(1, 1, 1, password=PASSWORD)
            n = fill(first)
            assert QUOTA // len(ENTRY) - 1 <= n <= QUOTA // len(ENTRY)
            assert refused_first_add(alice)  # the key is the identity, not the ledger
            lb = bob.create_ledger(1, 1, 1, password=PASSWORD)
            for _ in range(8):
                lb.add_entry(ENTRY)  # another identity keeps writing
            lb.close()
            deadline = time.monotonic() + 10
            while metrics(ens).get("bookie_quota_identities_over") != 1:
                assert time.monotonic() < deadline, metrics(ens)
                time.sleep(0.3)
            assert metrics(ens)["bookie_add_quota_refused_total"] >= 2
        ens.stop(0)
        ens.start(0)
        with client(ens, keys, "alice") as alice, client(ens, keys, "bob") as bob:
            assert refused_first_add(alice), "a restart forgot the usage"
            assert not refused_first_add(bob)
            # what alice wrote is still there, and readable
            rh = alice.open_ledger(first.ledger_id, password=PASSWORD)
            assert [e.data for e in rh.read_entries(0, n - 1)] == [ENTRY] * n
            alice.delete_ledger(first.ledger_id)
            deadline = time.monotonic() + 30
            while refused_first_add(alice):  # the GC deletes it, the quota pass sees it
                assert time.monotonic() < deadline, "a deleted ledger's bytes never came back"
                time.sleep(0.5)


def test_an_index_rebuild_keeps_whose_ledgers_are_whose(keys, tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=secure_conf(keys)) as ens:
        with client(ens, keys, "alice") as alice:
            fill(alice.create_ledger(1, 1, 1, password=PASSWORD))
        rebuild_index(ens)
        with client(ens, keys, "alice") as alice, client(ens, keys, "bob") as bob:
            assert refused_first_add(alice), "an index rebuild forgot whose ledgers are whose"
            assert not refused_first_add(bob)


def test_without_enrolment_the_quota_goes_by_the_ledgers_owner(tmp_path):
    conf = {"flushInterval": 50, "ledgerStorageQuotaBytes": QUOTA}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        # over TCP: a local socket's client is its uid (the test below)
        with BookKeeper(ens.metadata_uri, addEntryTimeout=5, useLocalSockets=False) as bk:
            full = bk.create_ledger(1, 1, 1, password=PASSWORD)
            fill(full)
            other = bk.create_ledger(1, 1, 1, password=PASSWORD)
            for _ in range(8):
                other.add_entry(ENTRY)  # another ledger, another owner: not refused
            other.close()


def test_over_the_local_sockets_the_quota_goes_by_the_uid(tmp_path):
    conf = {"flushInterval": 50, "ledgerStorageQuotaBytes": QUOTA}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        with BookKeeper(ens.metadata_uri, addEntryTimeout=5) as bk:
            fill(bk.create_ledger(1, 1, 1, password=PASSWORD))
            assert refused_first_add(bk)  # the same uid's next ledger: over its quota
        with BookKeeper(ens.metadata_uri, addEntryTimeout=5, useLocalSockets=False) as bk:
            other = bk.create_ledger(1, 1, 1, password=PASSWORD)
            other.add_entry(ENTRY)  # over TCP without a key: the ledger's own quota
            other.close()


def test_recovery_adds_are_no_way_around_the_quota(keys, tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=secure_conf(keys)) as ens:
        with client(ens, keys, "alice") as alice:
            lh = alice.create_ledger(1, 1, 1, password=PASSWORD)  # open, never written normally
            lid, key = lh.ledger_id, master_key(PASSWORD)
            as_alice = ClientCurve(keys["alice"][1], keys["bookie"][0])
            with RawBookieClient(ens.bookies[0], curve=as_alice) as raw:
                def recovery_add(e, flags=Flag.RECOVERY_ADD, k=key, who=raw):
                    lengths, data = wire.pack_batch([make_entry(lid, e, ENTRY)])
                    return who.request(who.add_sock, Op.ADD, lid, flags, [k, lengths, data])[0]
                statuses = [recovery_add(e) for e in range(4 * QUOTA // len(ENTRY))]
                assert Status.OVER_QUOTA in statuses, "a RECOVERY_ADD flood passed the quota"
                took = statuses.index(Status.OVER_QUOTA)
                assert took <= QUOTA // len(ENTRY) and set(statuses[:took]) == {Status.OK}
                # the ledger written only with RECOVERY_ADD is charged to alice's key
                assert refused_first_add(alice)
                nxt = took
                with RawBookieClient(ens.bookies[0], curve=ClientCurve(
                        keys["ops"][1], keys["bookie"][0])) as ops:
                    # an admin key (the recovery principal) is never refused for the quota
                    assert recovery_add(nxt, who=ops) == Status.OK
                    with open_metadata(ens.metadata_uri) as store:
                        cred = credential(recovery_secret(store), lid)
                    assert recovery_add(nxt + 1, Flag.RECOVERY_ADD | Flag.RECOVERY_CREDENTIAL,
                                        cred, ops) == Status.OK  # nor autorecovery's credential
                # a recovering reader's re-adds to a ledger the bookie holds fenced still go
                assert raw.fence(lid, key) == Status.OK
                assert recovery_add(nxt + 2) == Status.OK
