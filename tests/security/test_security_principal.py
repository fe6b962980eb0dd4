"""Limits per principal, and the refusal budget on the add socket (docs/security.md "Limits"),
against a real CURVE bookie: one enrolled key on many connections cannot take every long-poll
place, and a connection that floods refused adds is shut down while other writers are served."""

import os

import pytest
import zmq
import zmq.auth

from bookie import wire
from bookie.client.auth import ClientCurve
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Op, Status
from zsockets import long_poll, raw_dealer

KEY = b"principal-test-master-key"
MAX_PENDING_READS = 400
SHARE = MAX_PENDING_READS // 4  # long polls one connection, or one principal, may park
REFUSALS_PER_S = 1000  # workers/add_worker.py REFUSALS_PER_CONNECTION_PER_S


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("principal")
    made = {name: zmq.auth.create_certificates(str(root), name)
            for name in ("bookie", "alice", "mel", "rita", "ruth")}
    enrol = root / "clients"
    for role, names in (("writer", ("alice", "mel")), ("reader", ("rita", "ruth"))):
        os.makedirs(enrol / role)
        for name in names:
            with open(made[name][0]) as src, open(enrol / role / f"{name}.key", "w") as dst:
                dst.write(src.read())
    made["clients"] = str(enrol)
    return made


@pytest.fixture(scope="module")
def ens(keys):
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": keys["clients"],
            "flushInterval": 50, "maxPendingReadRequestsPerThread": MAX_PENDING_READS}
    with LocalBookies(1, conf=conf) as e:
        yield e


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def dealer(ctx, ens, keys, name, port_offset):
    """A raw CURVE DEALER of principal ``name`` on the add (0) or read (1) socket, and a monitor
    that sees it disconnected."""
    return raw_dealer(ctx, ens.bookies[0], port_offset, ClientCurve(keys[name][1], keys["bookie"][0]))


def statuses(sock, n: int, timeout_ms: int = 20_000) -> list:
    got = []
    while len(got) < n and sock.poll(timeout_ms):
        got.append(wire.unpack_header(sock.recv_multipart()[0])[1])
    return got


def statuses_of(socks, n: int, timeout_ms: int = 20_000) -> list:
    """The first ``n`` statuses answered on any of ``socks``."""
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    got = []
    while len(got) < n:
        ready = dict(poller.poll(timeout_ms))
        if not ready:
            break
        for sock in ready:
            got.append(wire.unpack_header(sock.recv_multipart()[0])[1])
    return got


def test_one_principal_on_four_connections_leaves_long_poll_places_to_another(ens, keys, ctx):
    ledger = 31
    create_ledgers(ens.metadata_uri, [ledger], KEY)  # a bookie stores only ids its store knows
    writer = RawBookieClient(ens.bookies[0], ctx=ctx,
                             curve=ClientCurve(keys["alice"][1], keys["bookie"][0]))
    assert writer.add(ledger, [make_entry(ledger, 0, b"x")], KEY) == Status.OK
    # rita parks a connection's full share on each of four connections: per connection only,
    # that would be every place of the read worker
    ritas = [dealer(ctx, ens, keys, "rita", 1)[0] for _ in range(4)]
    for c, s in enumerate(ritas):
        for i in range(SHARE):
            s.send_multipart(long_poll(c * SHARE + i, ledger))
    refused = statuses_of(ritas, 3 * SHARE)
    assert refused == [Status.TOO_MANY_REQUESTS] * (3 * SHARE)  # one share, whatever its connections
    assert statuses_of(ritas, 1, 300) == []  # the rest are parked
    ruth, _ = dealer(ctx, ens, keys, "ruth", 1)
    ruth.send_multipart(long_poll(1, ledger))
    assert not ruth.poll(500), "another principal's long poll was not parked"
    assert writer.write_lac(ledger, 6, KEY) == Status.OK  # the ledger moves past 5
    assert statuses(ruth, 1) == [Status.OK]
    assert statuses_of(ritas, SHARE) == [Status.OK] * SHARE  # what rita parked is answered too
    writer.close()


def test_a_connection_flooding_refused_adds_is_shut_and_a_writer_is_still_served(ens, keys, ctx):
    ledger = 41
    create_ledgers(ens.metadata_uri, [ledger], KEY)
    writer = RawBookieClient(ens.bookies[0], ctx=ctx,
                             curve=ClientCurve(keys["alice"][1], keys["bookie"][0]))
    assert writer.add(ledger, [make_entry(ledger, 0, b"legit")], KEY) == Status.OK
    # mel, an enrolled writer, adds to alice's ledger with the wrong key, as fast as it can
    flooder, monitor = dealer(ctx, ens, keys, "mel", 0)
    lengths, data = wire.pack_batch([make_entry(ledger, 1, b"squat")])
    for rid in range(3 * REFUSALS_PER_S):
        flooder.send_multipart([wire.pack_header(Op.ADD, 0, rid, ledger), b"wrong key", lengths, data])
    assert monitor.poll(10_000), "the flooding connection was not shut down"
    got = statuses(flooder, 3 * REFUSALS_PER_S, 1000)
    assert set(got) <= {Status.UNAUTHORIZED} and len(got) >= REFUSALS_PER_S // 2, len(got)
    for i in range(1, 21):  # the well-behaved writer on its own connection
        assert writer.add(ledger, [make_entry(ledger, i, b"legit %d" % i)], KEY) == Status.OK
    assert writer.read(ledger, 0, 21)[0] == Status.OK
    writer.close()
    assert "add" in [line for line in ens.log(0).splitlines() if "connection shut for flooding" in line][0]
