"""bench bookie --trace: the lone-add breakdown lines up the client's, the add worker's and the
journal's stamps of each add (pure part, with made-up stamps), and end to end against a real
bookie every step of every traced add is there.  Never a speed."""

import orjson

from bookie.appliance.cli import main
from bookie.bench import trace
from bookie.storage.trace import AddStamp, GroupStamp


def stamps_of_two_adds():
    client = [{"entry_id": 5, "call": 1000, "callback": 1900, "awake": 2000},
              {"entry_id": 6, "call": 3000, "callback": 3950, "awake": 4000}]
    io = [("io_take", 1010), ("io_sent", 1020), ("io_recv", 1800),
          ("io_take", 3010), ("io_sent", 3030), ("io_recv", 3900)]
    adds = [AddStamp(99, 5, 500, 1100, 1200, 1700),
            AddStamp(7, 5, 600, 0, 0, 0),  # another ledger's entry 5: not ours
            AddStamp(99, 6, 900, 3100, 3150, 3800)]
    # the first add is durable with the group ending at 500; the second shares none: it is in
    # the group ending at 1000 (the one ending at 800 holds only earlier records)
    groups = [GroupStamp(1000, 3700, 300, 200), GroupStamp(500, 1600, 300, 100),
              GroupStamp(800, 2500, 50, 40)]
    return client, io, adds, groups


def test_each_add_gets_its_own_stamps_from_every_source():
    client, io, adds, groups = stamps_of_two_adds()
    stamped = trace.match(client, io, adds, groups, ledger_id=99)
    assert [s["received"] for s in stamped] == [1100, 3100]
    assert [(s["written"], s["synced"]) for s in stamped] == [(1500, 1600), (3500, 3700)]
    durations = trace.steps(stamped)
    assert durations[trace.TOTAL[0]].tolist() == [1000, 1000]
    assert durations["journal: fdatasync"].tolist() == [100, 200]
    assert durations["wire: client send -> add worker took it"].tolist() == [80, 70]
    # the steps cover the whole path: they add up to the total, add by add
    assert sum(durations[name] for name, _, _ in trace.STEPS).tolist() == [1000, 1000]


def test_an_add_the_bookie_did_not_report_is_left_out():
    client, io, adds, groups = stamps_of_two_adds()
    stamped = trace.match(client, io, adds[:2], groups, ledger_id=99)
    assert [s["entry_id"] for s in stamped] == [5]
    assert trace.match(client, io, adds, groups[1:2], ledger_id=99)[0]["entry_id"] == 5
    assert len(trace.match(client, io, adds, groups[1:2], ledger_id=99)) == 1


def test_table_lists_every_step():
    client, io, adds, groups = stamps_of_two_adds()
    fig = trace.figures_us(trace.steps(trace.match(client, io, adds, groups, 99)))
    text = trace.table(fig, 2)
    for name, _, _ in trace.STEPS + (trace.TOTAL,):
        assert name in text
    assert fig[trace.TOTAL[0]]["p50"] == 1.0  # microseconds


def test_trace_against_a_real_bookie(capsys, tmp_path):
    rc = main(["bench", "bookie", "--localbookie", "--data-dir", str(tmp_path), "--trace",
               "--sync-time", "30", "--sync-count", "40", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = orjson.loads(captured.out)
    ph = result["phases"]["trace"]
    assert ph["ops"] == 40 and ph["traced"] == 40 and result["params"]["trace"] is True
    assert set(ph["steps_us"]) == {name for name, _, _ in trace.STEPS} | {trace.TOTAL[0]}
    for name, fig in ph["steps_us"].items():
        assert fig["p50"] is not None and fig["p50"] >= 0, name
    assert "disk" in result["phases"]
    assert "lone add, step by step (40 adds; microseconds)" in captured.err
    # tracing is off unless asked: the bookie's own trace files lived in a scratch directory
    assert not list(tmp_path.rglob("*.trace"))
