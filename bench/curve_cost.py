"""CURVE's cost on one real bookie: pipelined 1 KiB adds (one entry per ADD), then READs of them
one entry each, against a plain bookie and a CURVE one, both started at once and measured in
alternating rounds (a shared machine's load drifts between rounds, not within a pair).

    python -m bookie.bench.curve_cost [N_PER_PHASE=20000] [ROUNDS=3]
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import time

import zmq
import zmq.auth

from bookie import wire
from bookie.client.auth import ClientCurve
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Op, Status

WINDOW = 64  # requests in flight
KEY = b"bench-master-key"
PAYLOAD = b"x" * 1024


def pipelined(sock, make, n: int) -> float:
    """Requests a second: ``n`` requests ``make(request_id, i)``, WINDOW in flight."""
    ids = itertools.count(1)
    sent = done = 0
    t0 = time.perf_counter()
    while done < n:
        while sent < n and sent - done < WINDOW:
            sock.send_multipart(make(next(ids), sent))
            sent += 1
        frames = sock.recv_multipart()
        if wire.unpack_header(frames[0])[1] != Status.OK:
            raise RuntimeError(f"request answered {wire.unpack_header(frames[0])[1]}")
        done += 1
    return n / (time.perf_counter() - t0)


def one_round(bookie: str, curve, ledger: int, n: int) -> tuple[float, float]:
    def add(rid, i):
        lengths, data = wire.pack_batch([make_entry(ledger, i, PAYLOAD, lac=i - 1)])
        return [wire.pack_header(Op.ADD, 0, rid, ledger), KEY, lengths, data]

    def read(rid, i):
        return [wire.pack_header(Op.READ, 0, rid, ledger), wire.READ_BODY.pack(i, 1)]

    with RawBookieClient(bookie, ctx=zmq.Context.instance(), curve=curve) as c:
        return pipelined(c.add_sock, add, n), pipelined(c.read_sock, read, n)


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 20_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    root = tempfile.mkdtemp(prefix="curve-cost-")
    try:
        bookie_pub, bookie_sec = zmq.auth.create_certificates(root, "bookie")
        client_pub, client_sec = zmq.auth.create_certificates(root, "writer")
        os.makedirs(os.path.join(root, "clients", "writer"))
        shutil.copy(client_pub, os.path.join(root, "clients", "writer"))
        curve_conf = {"curveSecretKeyFile": bookie_sec,
                      "curveClientKeysDirectory": os.path.join(root, "clients")}
        curve = ClientCurve(client_sec, bookie_pub)
        with LocalBookies(1) as plain, LocalBookies(1, conf=curve_conf) as secured:
            ledger = 1
            for r in range(rounds):
                for name, ens, cc in (("plain", plain, None), ("curve", secured, curve)):
                    create_ledgers(ens.metadata_uri, [ledger], KEY)  # bookies store only known ids
                    adds, reads = one_round(ens.bookies[0], cc, ledger, n)
                    ledger += 1
                    print(f"round {r} {name}: adds/s {adds:.0f} reads/s {reads:.0f} "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
