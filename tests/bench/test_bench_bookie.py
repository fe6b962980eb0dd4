"""bench bookie's pure parts: entries as the wire spec wants them, the add pipeline's rules, and
how it meets a bookie that refuses or is not there (a scripted ROUTER stands in for a bookie)."""

import threading

import numpy as np
import orjson
import pytest
import zmq

from bookie import wire
from bookie.appliance.cli import main
from bookie.bench.bookie_bench import (AddPipeline, BenchError, EntryBatcher, Ledgers,
                                       parse_bookie)


def test_batches_are_valid_wire_batches():
    b = EntryBatcher(1024, "crc32")
    lengths, data = b.batch(77, 500, 10, lac=499)
    lens, offsets = wire.batch_offsets(lengths, len(data), 5 * 1024 * 1024)
    assert lens.tolist() == [32 + 8 + 1024] * 10
    assert wire.batch_header_fields(data, offsets, 0).tolist() == [77] * 10
    assert wire.batch_header_fields(data, offsets, 1).tolist() == list(range(500, 510))
    assert wire.batch_header_fields(data, offsets, 2).tolist() == [499] * 10
    assert wire.batch_header_fields(data, offsets, 3).tolist() == [(e + 1) * 1024 for e in range(500, 510)]
    entries = wire.split_batch(lengths, data)
    assert bytes(entries[3][40:]) == b.payload.tobytes()


def test_batches_do_not_share_state_between_calls():
    b = EntryBatcher(16, "dummy")
    _, first = b.batch(1, 0, 4, -1)
    _, second = b.batch(1, 4, 4, 3)
    assert first != second
    assert wire.unpack_entry_header(first[:32]) == (1, 0, -1, 16)


def test_pipeline_keeps_the_window_and_the_limit():
    pipe = AddPipeline(Ledgers([5, 6]), batch=10, window=3, limit=45, rate=None, now_ns=0)
    sends = []
    while pipe.can_send(0):
        sends.append(pipe.next(0))
    assert [(s.ledger_id, s.first_entry_id, s.count) for s in sends] == [(5, 0, 10), (6, 0, 10), (5, 10, 10)]
    pipe.answer(sends[0].request_id, wire.Status.OK)
    assert pipe.ledgers.acked_upto == {5: 9, 6: -1}
    sends.append(pipe.next(1))
    sends.append(None if not pipe.can_send(1) else pipe.next(1))
    assert sends[-1] is None  # window full again
    for s in sends[1:4]:
        pipe.answer(s.request_id, wire.Status.OK)
    last = pipe.next(2)
    assert (last.ledger_id, last.first_entry_id, last.count, last.lac) == (5, 20, 5, 19)
    assert not pipe.can_send(2) and not pipe.done  # limit reached, one in flight
    pipe.answer(last.request_id, wire.Status.OK)
    assert pipe.done and pipe.sent_entries == 45


def test_paced_pipeline_measures_from_the_intended_time():
    pipe = AddPipeline(Ledgers([1]), batch=100, window=100, limit=None, rate=1000.0, now_ns=0)
    assert pipe.interval_ns == 100_000_000  # 100 entries per message at 1000/s
    first = pipe.next(0)
    assert not pipe.can_send(50_000_000)
    late = pipe.next(350_000_000)  # the sender fell behind: this one was due at 100 ms
    assert (first.start_ns, late.start_ns) == (0, 100_000_000)
    assert pipe.can_send(350_000_000)  # and it catches up


def test_paced_closed_loop_skips_missed_slots():
    pipe = AddPipeline(Ledgers([1]), batch=1, window=1, limit=None, rate=1000.0, now_ns=0,
                       from_intended=False)
    s = pipe.next(0)
    pipe.answer(s.request_id, wire.Status.OK)
    late = pipe.next(5_000_000)  # 5 ms late: measured from the real send, next slot later
    assert late.start_ns == 5_000_000 and pipe.due_ns == 6_000_000


def test_refusals_stop_the_bench_and_back_pressure_does_not():
    pipe = AddPipeline(Ledgers([1]), batch=1, window=4, limit=None, rate=None, now_ns=0)
    a, b = pipe.next(0), pipe.next(0)
    assert pipe.answer(a.request_id, wire.Status.TOO_MANY_REQUESTS) is a
    assert pipe.answer(a.request_id, wire.Status.OK) is None  # late duplicate: ignored
    with pytest.raises(BenchError, match="UNAUTHORIZED"):
        pipe.answer(b.request_id, wire.Status.UNAUTHORIZED)


def test_bookie_address_must_be_host_and_port():
    assert parse_bookie("127.0.0.1:3181") == ("127.0.0.1", 3181)
    for bad in ("localhost", ":3181", "h:0", "h:65535", "h:x"):
        with pytest.raises(ValueError):
            parse_bookie(bad)


class ScriptedBookie:
    """A ROUTER answering INFO and every ADD with one fixed status."""

    def __init__(self, add_status):
        self.add_status = add_status
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.stop = threading.Event()
        self.adds = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            ident, hdr, *rest = self.sock.recv_multipart()
            op, _flags, rid, lid = wire.unpack_header(hdr)
            if op == wire.Op.INFO:
                self.sock.send_multipart([ident, wire.pack_header(op, 0, rid, lid),
                                          orjson.dumps({"bookie_id": "scripted"})])
            else:
                self.adds += len(rest[1]) // 4
                self.sock.send_multipart([ident, wire.pack_header(op, self.add_status, rid, lid)])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        self.ctx.term()


def test_a_refusing_bookie_is_one_clear_error(capsys):
    with ScriptedBookie(wire.Status.UNAUTHORIZED) as fake:
        rc = main(["bench", "bookie", "--bookie", f"127.0.0.1:{fake.port}", "--time", "0.3",
                   "--sync-time", "0.2", "--quiet", "--timeout", "5"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"bookie bench: the bookie answered UNAUTHORIZED to an ADD of ledger "
                   f"{err[0].rsplit(' ', 1)[1]}"]


def test_back_pressure_is_counted_and_fails_the_run(capsys):
    with ScriptedBookie(wire.Status.TOO_MANY_REQUESTS) as fake:
        rc = main(["bench", "bookie", "--bookie", f"127.0.0.1:{fake.port}", "--time", "0.3",
                   "--sync-time", "0", "--warmup-messages", "0", "--quiet", "--timeout", "5"])
    out = orjson.loads(capsys.readouterr().out)
    ph = out["phases"]["pipelined"]
    assert rc == 1 and ph["ops"] == 0 and ph["errors"] == ph["rejected"] > 0


def test_counts_match_what_the_bookie_received(capsys):
    with ScriptedBookie(wire.Status.OK) as fake:
        rc = main(["bench", "bookie", "--bookie", f"127.0.0.1:{fake.port}", "--time", "5",
                   "--sync-time", "5", "--sync-count", "25", "--sendlimit", "1234",
                   "--warmup-messages", "300", "--batch", "50", "--quiet", "--timeout", "5"])
        received = fake.adds
    out = orjson.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["phases"]["sync"]["ops"] == 25
    assert out["phases"]["pipelined"]["ops"] == 1234
    assert out["phases"]["pipelined"]["messages"] == 25  # 24 x 50 + 34
    assert out["phases"]["pipelined"]["latency_ms"]["count"] == 1234
    assert received == 25 + 300 + 1234


def test_no_bookie_there_is_a_timeout_not_a_hang(capsys):
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as silent:
        port = silent.bind_to_random_port("tcp://127.0.0.1")
        rc = main(["bench", "bookie", "--bookie", f"127.0.0.1:{port}", "--timeout", "0.5",
                   "--quiet"])
        silent.close(0)
    assert rc == 2
    assert "no answer from bookie" in capsys.readouterr().err


def test_sync_rate_corrects_for_coordinated_omission(capsys):
    with ScriptedBookie(wire.Status.OK) as fake:
        main(["bench", "bookie", "--bookie", f"127.0.0.1:{fake.port}", "--sync-time", "0.3",
              "--sync-rate", "100000", "--time", "0.1", "--warmup-messages", "0", "--quiet"])
    sync = orjson.loads(capsys.readouterr().out)["phases"]["sync"]
    # A round trip takes far longer than 10 us: every add hides several more.
    assert sync["latency_ms"]["count"] > sync["ops"] > 0
    assert np.isfinite(sync["latency_ms"]["p99"])
