"""Long-poll shares hold against several loopback connections (issue 22, finding 7).

A real bookie without CURVE and with 400 long-poll places (a share is 100): four connections
of one local process used to be four principals and take every place; now they are one host,
127.0.0.1, and park 100 between them; a client of another host (127.0.0.2 as the bookie sees
it) still parks its own, and when the LAC moves every parked poll is answered.
"""

import pytest
import zmq

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from zsockets import long_poll, raw_dealer

KEY = b"loopback-shares-key"
PLACES = 400
SHARE = PLACES // 4


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    conf = {"metadataServiceUri": "", "maxPendingReadRequestsPerThread": PLACES}
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("loopshare")), conf=conf) as e:
        yield e


def statuses(sock, n: int, timeout_ms: int = 30_000) -> list[int]:
    out = []
    while len(out) < n and sock.poll(timeout_ms):
        out.append(wire.unpack_header(sock.recv_multipart()[0])[1])
    return out


def test_four_loopback_connections_hold_one_share_and_another_host_still_parks(ens):
    ledger = 11
    with RawBookieClient(ens.bookies[0], timeout_s=30) as writer:
        assert writer.add(ledger, [make_entry(ledger, 0, b"e0")], KEY) == Status.OK
        ctx = zmq.Context()
        try:
            conns = [raw_dealer(ctx, ens.bookies[0], 1)[0] for _ in range(4)]
            rid = 0
            for s in conns:  # each asks for a whole share, one connection after the other
                for _ in range(SHARE):
                    s.send_multipart(long_poll(rid, ledger))
                    rid += 1
                got = statuses(s, SHARE, 1_500)
                if s is conns[0]:  # the first parks the host's share
                    assert got == []
                else:  # the three others are refused whole
                    assert got == [Status.TOO_MANY_REQUESTS] * SHARE
            other, _ = raw_dealer(ctx, ens.bookies[0], 1, source="127.0.0.2")
            for _ in range(SHARE):
                other.send_multipart(long_poll(rid, ledger))
                rid += 1
            assert statuses(other, 1, 1_000) == []  # parked, not refused
            assert writer.write_lac(ledger, 6, KEY) == Status.OK  # the LAC moves past 5
            assert statuses(conns[0], SHARE) == [Status.OK] * SHARE
            assert statuses(other, SHARE) == [Status.OK] * SHARE
        finally:
            ctx.destroy(linger=0)
