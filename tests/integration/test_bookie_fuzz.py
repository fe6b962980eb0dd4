"""Malformed input on both sockets of a running bookie: an error status or a drop, never a
crash, never a change to stored data; correct requests are served during and after."""

import os
import random

import pytest
import zmq
from hypothesis import HealthCheck, given, settings, strategies as st

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from zsockets import pin
from bookie.wire import Op, Status

KEY = b"fuzz-master-key"
LEDGER = 4242


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"metadataServiceUri": "", "nettyMaxFrameSizeBytes": 65536}) as e:
        with RawBookieClient(e.bookies[0]) as c:
            assert c.add(LEDGER, [make_entry(LEDGER, i, b"keep %d" % i) for i in range(10)], KEY) == Status.OK
        yield e


@pytest.fixture(scope="module")
def raw_socks(ens):
    ctx = zmq.Context()
    socks = []
    for offset in (0, 1):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        _, port = pin(s, ens.bookies[0])
        p = port + offset
        s.connect(f"tcp://127.0.0.1:{p}")
        socks.append(s)
    yield socks
    for s in socks:
        s.close()
    ctx.term()


def _header_like(draw_op, flags, rid, ledger, version=1, magic=b"BK"):
    return wire.HEADER.pack(magic, version, draw_op, flags, 0, rid, ledger)


frame = st.binary(max_size=64)
header = st.builds(_header_like, st.integers(0, 255), st.integers(0, 0xFFFF),
                   st.integers(0, 2**64 - 1), st.integers(-2**63, 2**63 - 1),
                   st.sampled_from([1, 1, 1, 0, 2, 255]), st.sampled_from([b"BK", b"BK", b"XX"]))
lengths = st.lists(st.integers(0, 2**32 - 1), max_size=6).map(
    lambda xs: b"".join(x.to_bytes(4, "little") for x in xs))
message = st.one_of(
    st.lists(frame, min_size=0, max_size=6),
    st.tuples(header, st.lists(frame, max_size=5)).map(lambda t: [t[0], *t[1]]),
    st.tuples(header, frame, lengths, st.binary(max_size=300)).map(list),
)


def _drain(sock):
    while sock.poll(0):
        sock.recv_multipart()


def _still_serves(ens):
    with RawBookieClient(ens.bookies[0], timeout_s=5) as c:
        status, got = c.read(LEDGER, 0, 100)
        assert status == Status.OK
        assert got == [make_entry(LEDGER, i, b"keep %d" % i) for i in range(10)]
        assert c.add(LEDGER + 1, [make_entry(LEDGER + 1, random.randrange(10**6), b"ok")], KEY) == Status.OK


def _malformed_frames_get_an_error_or_are_dropped(ens, raw_socks, msgs, which):
    sock = raw_socks[which]
    for m in msgs:
        if m:
            sock.send_multipart(m)
    _still_serves(ens)
    # Whatever came back carries an error status (or OK for a request that happened to be valid).
    while sock.poll(50):
        frames = sock.recv_multipart()
        assert len(frames[0]) == wire.HEADER_SIZE


# Each example waits 50 ms for late answers: 50 examples in the default suite (whose
# tests/fuzz/test_bookie_frames_fuzz.py also sends 20,000 fuzzed frames at a bookie), 150 under
# -m soak.
_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_MESSAGES = dict(msgs=st.lists(message, min_size=1, max_size=5), which=st.integers(0, 1))


@settings(max_examples=50, **_SETTINGS)
@given(**_MESSAGES)
def test_malformed_frames_get_an_error_or_are_dropped(ens, raw_socks, msgs, which):
    _malformed_frames_get_an_error_or_are_dropped(ens, raw_socks, msgs, which)


@pytest.mark.soak
@settings(max_examples=150, **_SETTINGS)
@given(**_MESSAGES)
def test_malformed_frames_get_an_error_or_are_dropped_150_examples(ens, raw_socks, msgs, which):
    _malformed_frames_get_an_error_or_are_dropped(ens, raw_socks, msgs, which)


def test_every_op_with_wrong_frame_counts_answers_bad_request(ens):
    with RawBookieClient(ens.bookies[0]) as c:
        for sock, op in ((c.add_sock, Op.ADD), (c.add_sock, Op.WRITE_LAC), (c.read_sock, Op.READ),
                         (c.read_sock, Op.READ_LAC), (c.add_sock, Op.READ), (c.read_sock, Op.ADD)):
            for body in ([], [b"x"], [b"a", b"b", b"c", b"d", b"e"]):
                if op == Op.READ_LAC and not body:
                    continue  # a plain READ_LAC has no body: valid
                status, _ = c.request(sock, op, LEDGER, 0, body)
                assert status == Status.BAD_REQUEST, (op, body)
        status, _ = c.request(c.add_sock, Op.ADD, LEDGER, 0, [KEY, b"\xff\xff\xff\xff", os.urandom(50)])
        assert status == Status.BAD_REQUEST
        status, _ = c.request(c.read_sock, Op.READ, LEDGER, 0, [wire.READ_BODY.pack(2**63 + 5, 1)])
        assert status == Status.BAD_REQUEST
        status, _ = c.request(c.add_sock, Op.ADD, LEDGER, 0,
                              [KEY, *wire.pack_batch([make_entry(LEDGER, -3, b"neg")])])
        assert status == Status.BAD_REQUEST
    _still_serves(ens)
    assert "fatal" not in ens.log(0)
