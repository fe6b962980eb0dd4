"""Striped reads against real bookies: the STRIDE flag of READ on the wire, and the client's
reader using it for ledgers striped over an ensemble (E > Qw or E = Qw > 1)."""

import pytest

from bookie import wire
from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status

KEY = b"master-key-0123456789"
PW = b"pw"


@pytest.fixture(scope="module")
def one():
    with LocalBookies(1, conf={"metadataServiceUri": "", "flushInterval": 50}) as e:
        yield e


def strided(client, ledger_id, first, count, stride, fence_key=None):
    flags, body = wire.read_request(first, count, stride)
    body = [body]
    if fence_key is not None:
        flags |= Flag.FENCE
        body.append(fence_key)
    status, frames = client.request(client.read_sock, Op.READ, ledger_id, flags, body)
    if status != Status.OK:
        return status, []
    return status, [bytes(e) for e in wire.split_batch(frames[0], frames[1])]


def test_a_striped_read_returns_every_stride_th_entry_up_to_the_first_missing(one):
    ledger = 501
    held = [e for e in range(60) if e % 3 != 2]  # a replica at write-set position 0 and 1 of E=3
    entries = {e: make_entry(ledger, e, b"v%d" % e) for e in held}
    with RawBookieClient(one.bookies[0]) as c:
        assert c.add(ledger, [entries[e] for e in held], KEY) == Status.OK
        assert strided(c, ledger, 0, 100, 3) == (Status.OK, [entries[e] for e in range(0, 60, 3)])
        assert strided(c, ledger, 1, 5, 3) == (Status.OK, [entries[e] for e in (1, 4, 7, 10, 13)])
        # stops at the first entry it does not hold
        assert strided(c, ledger, 0, 100, 2) == (Status.OK, [entries[0]])
        assert strided(c, ledger, 2, 10, 3) == (Status.NO_ENTRY, [])
        assert strided(c, ledger + 1, 0, 10, 3) == (Status.NO_LEDGER, [])
        # stride 1 with the flag is the plain read
        assert strided(c, ledger, 0, 2, 1) == c.read(ledger, 0, 2)
        # with FENCE: fenced first, then answered
        assert strided(c, ledger, 3, 2, 3, fence_key=KEY) == (Status.OK, [entries[3], entries[6]])
        assert c.add(ledger, [make_entry(ledger, 60, b"x")], KEY) == Status.FENCED


@pytest.mark.parametrize("flags, body", [
    (Flag.STRIDE, wire.READ_BODY.pack(0, 1)),
    (0, wire.READ_STRIDE_BODY.pack(0, 1, 3)),
    (Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 1, 0)),
    (Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 1, wire.MAX_STRIDE + 1)),
    (Flag.STRIDE, wire.READ_STRIDE_BODY.pack(0, 0, 3)),
])
def test_malformed_striped_reads_are_refused_and_the_bookie_serves_on(one, flags, body):
    with RawBookieClient(one.bookies[0]) as c:
        status, _ = c.request(c.read_sock, Op.READ, 502, flags, [body])
        assert status == Status.BAD_REQUEST
        assert c.add(502, [make_entry(502, 0, b"ok")], KEY) == Status.OK
        assert strided(c, 502, 0, 1, 2) == (Status.OK, [make_entry(502, 0, b"ok")])


@pytest.fixture(scope="module")
def three():
    with LocalBookies(3) as lb, BookKeeper(lb.metadata_uri) as bk:
        yield lb, bk


@pytest.mark.parametrize("e, w", [(3, 2), (3, 3), (2, 1)])
def test_the_client_reads_striped_ledgers_whole(three, e, w):
    _, bk = three
    lh = bk.create_ledger(e, w, min(w, 2), password=PW)
    payloads = [b"e%d-" % i + bytes(i % 50) for i in range(2000)]
    lh.add_range_async(payloads).result(60)
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, password=PW, recovery=False)
    assert [x.data for x in rh.read_entries(0, 1999)] == payloads
    assert [x.data for x in rh.read_entries(7, 11)] == payloads[7:12]


def test_a_reader_that_loses_a_replica_reads_on_from_the_others():
    with LocalBookies(3) as lb, BookKeeper(lb.metadata_uri) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        payloads = [b"x%d" % i for i in range(3000)]
        lh.add_range_async(payloads).result(60)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=PW, recovery=False)
        assert [x.data for x in rh.read_entries(0, 999)] == payloads[:1000]
        lb.kill(1)
        assert [x.data for x in rh.read_entries(1000, 2999)] == payloads[1000:]
