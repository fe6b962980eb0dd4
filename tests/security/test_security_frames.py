"""Messages of many frames are refused before ZeroMQ holds them whole (issue 22, finding 5).

A real bookie with a 160 MiB worker budget.  An unauthenticated client sends ADDs of 220
frames of 1 MiB (each frame under the add socket's frame limit), a new one every 1.5 s, while a
writer adds on its own connection: the add worker shuts each such connection once what is
still arriving of its message passes the add size limit (workers/frame_guard.py), so it never
nears its budget and is never killed, and the writer's ledger keeps going.  Before, the memory
watch killed the add worker 4-5 times in 7.5 s and the writer's adds failed.
"""

import threading
import time

import pytest
import zmq

from bookie import wire
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Op, Status
from zsockets import HandshakeError, pin, zmtp_partial_sender

LIMIT_MB = 160
KEY = b"frames-test-master-key"


@pytest.fixture
def ens(tmp_path):
    conf = {"metadataServiceUri": "", "workerMemoryLimitMB": LIMIT_MB, "flushInterval": 20}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as e:
        yield e


def send_many_frames(ctx, bookie: str, frames: int, monitor_events: list) -> zmq.Socket:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.LINGER, 0)
    mon = s.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    monitor_events.append(mon)
    host, port = pin(s, bookie)
    s.connect(f"tcp://127.0.0.2:0;{host}:{port}")  # another address than the writer's
    s.send(wire.pack_header(Op.ADD, 0, 1, 5), zmq.SNDMORE)
    chunk = b"m" * (1 << 20)
    for _ in range(frames):
        s.send(chunk, zmq.SNDMORE)
    s.send(b"end")
    return s


def test_many_frame_adds_shut_their_connection_and_never_restart_the_add_worker(ens):
    add_pid = ens.worker_pid(0, "add")
    ledger = 21
    written, failures = [0], []
    stop = threading.Event()

    def writer():
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            e = 0
            while not stop.is_set():
                status = c.add(ledger, [make_entry(ledger, e, b"w%d" % e, lac=e - 1)], KEY)
                if status != Status.OK:
                    failures.append((e, status))
                    return
                e += 1
                written[0] = e
                time.sleep(0.01)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    ctx = zmq.Context()
    monitors: list = []
    try:
        senders = []
        for _ in range(5):  # 7.5 s of the attack
            senders.append(send_many_frames(ctx, ens.bookies[0], 220, monitors))
            time.sleep(1.5)
        dropped = sum(1 for m in monitors if m.poll(5000))
    finally:
        stop.set()
        t.join(15)
        ctx.destroy(linger=0)
    log = ens.log(0)
    assert "worker over its memory limit" not in log, log[-3000:]
    assert ens.worker_pid(0, "add") == add_pid
    assert dropped == 5, (dropped, log[-3000:])
    assert log.count("a message over the add size limit still arriving") >= 5
    assert not failures and written[0] > 50, (failures, written)
    with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
        status, entries = c.read(ledger, written[0] - 1)
        assert status == Status.OK


@pytest.mark.security  # a worker killed on purpose, and a restart: opt-in (-m security)
def test_a_memory_kill_shuts_the_peer_that_held_the_most_out(ens):
    """Twelve connections of one peer, each with 15 MiB of a message that never ends (under the
    add size limit, so none is shut alone), pass the add worker's 160 MiB budget: the worker is
    killed, and the one started after it shuts that peer's connections out."""
    host, port = ens.bookies[0].rsplit(":", 1)
    held = []
    try:
        try:
            for _ in range(12):
                s, send_frame = zmtp_partial_sender(host, int(port), source="127.0.0.3")
                held.append(s)
                send_frame(wire.pack_header(Op.ADD, 0, 1, 5))
                for _ in range(15):
                    send_frame(b"m" * (1 << 20))
                if "worker over its memory limit" in ens.log(0):
                    break
        except OSError:
            pass  # the worker was killed under us: its connections went with it
        deadline = time.monotonic() + 20
        while "peer shut out" not in ens.log(0):
            assert time.monotonic() < deadline, ens.log(0)[-3000:]
            time.sleep(0.1)
        assert "worker over its memory limit" in ens.log(0)
        assert "peer=127.0.0.3" in ens.log(0)
        deadline = time.monotonic() + 20
        late = None
        while True:  # the restarted worker serves, but not that peer
            try:
                late, _ = zmtp_partial_sender(host, int(port), source="127.0.0.3")
                break
            except HandshakeError:
                break  # shut down as soon as the worker saw it: before the CURVE handshake ended
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        if late is not None:
            held.append(late)
            assert closed_by_peer(late, 5.0)  # shut down as soon as the worker sees it
    finally:
        for s in held:
            s.close()
    with RawBookieClient(ens.bookies[0], timeout_s=10) as c:  # another peer is served
        assert c.add(31, [make_entry(31, 0, b"after")], KEY) == Status.OK


def test_a_message_that_never_ends_is_shut_past_the_add_size_limit(ens):
    host, port = ens.bookies[0].rsplit(":", 1)
    s, send_frame = zmtp_partial_sender(host, int(port), source="127.0.0.2")
    try:
        send_frame(wire.pack_header(Op.ADD, 0, 1, 5))
        try:
            for _ in range(200):
                send_frame(b"m" * (1 << 20))
        except OSError:
            pass  # reset, or a broken pipe: shut already
        assert closed_by_peer(s, 5.0)
    finally:
        s.close()
    deadline = time.monotonic() + 10  # the worker writes the line just after it shuts the socket
    while "a message over the add size limit still arriving" not in ens.log(0):
        assert time.monotonic() < deadline, ens.log(0)[-3000:]
        time.sleep(0.1)
    assert "worker over its memory limit" not in ens.log(0)


def closed_by_peer(sock, timeout_s: float) -> bool:
    """True once the other end has closed ``sock`` (end of stream or reset) within the time."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_the_raw_curve_sender_needs_the_bookies_key(ens):
    """The raw CurveZMQ sender the tests above use: with the key the bookie's registration
    publishes the add worker reads its frames (a whole ADD sent frame by frame is stored); with
    another key the bookie ends the handshake."""
    host, port = ens.bookies[0].rsplit(":", 1)
    s, send_frame = zmtp_partial_sender(host, int(port))
    try:
        lengths, data = wire.pack_batch([make_entry(41, 0, b"raw curve")])
        for part in (wire.pack_header(Op.ADD, 0, 1, 41), KEY, lengths):
            send_frame(part)
        send_frame(data, more=False)
        deadline = time.monotonic() + 10
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            while True:
                status, entries = c.read(41, 0)
                if status == Status.OK:
                    break
                assert time.monotonic() < deadline, (status, ens.log(0)[-3000:])
                time.sleep(0.1)
        assert entries == [make_entry(41, 0, b"raw curve")]
    finally:
        s.close()
    from nacl.public import PrivateKey
    with pytest.raises(HandshakeError):
        zmtp_partial_sender(host, int(port), server_key=bytes(PrivateKey.generate().public_key))
