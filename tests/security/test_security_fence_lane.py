"""Under enrolled CURVE a fence of a ledger the add worker holds no record of in memory (every
ledger after a restart, or one it never held) goes through the owner resolver with a principal.
A fence comes from the read worker's control socket, whose frames carry no client metadata:
reading the User-Id there raised EINVAL and killed the add worker, so every recovery after a
restart failed ("could not fence"), and the worker restarted at each try.  Real bookie, real
enrolment, the public client API."""

from __future__ import annotations

import os

import zmq.auth

from bookie.client import BookKeeper
from bookie.testing import LocalBookies

PASSWORD = b"fence-lane"


def test_a_recovery_after_a_restart_fences_under_enrolled_curve(tmp_path):
    made = {n: zmq.auth.create_certificates(str(tmp_path), n) for n in ("bookie", "alice")}
    enrol = tmp_path / "clients"
    for role in ("reader", "writer", "admin"):
        os.makedirs(enrol / role)
    with open(made["alice"][0]) as src, open(enrol / "writer" / "alice.key", "w") as dst:
        dst.write(src.read())
    conf = {"curveSecretKeyFile": made["bookie"][1], "curveClientKeysDirectory": str(enrol),
            "flushInterval": 50}

    def client():
        return BookKeeper(ens.metadata_uri, curveSecretKeyFile=made["alice"][1],
                          curveServerKeys=made["bookie"][0], addEntryTimeout=5)

    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens:
        with client() as bk:
            lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
            for i in range(3):
                lh.add_entry(b"entry-%d" % i)
        ens.stop(0)
        ens.start(0)
        with client() as bk:
            rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)  # fences, then recovers
            assert [e.data for e in rh.read_entries(0, rh.last_add_confirmed)] == \
                [b"entry-%d" % i for i in range(3)]
        assert "fatal" not in ens.log(0), ens.log(0)[-3000:]
