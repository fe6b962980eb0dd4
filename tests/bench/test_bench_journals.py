"""``bench writes --journals 1,2``: one run against fresh local bookies with one and then two
journals (journalDirectories), both on the data directory's disk, and the ratio.  Never a speed."""

import glob
import os

import orjson
import pytest

from bookie.appliance.cli import main


def test_bench_writes_compares_one_and_two_journals_in_one_run(capsys, tmp_path):
    rc = main(["bench", "writes", "--localbookie", "1", "--data-dir", str(tmp_path),
               "--ensemble", "1", "--quorum", "1", "--ledgers", "2", "--throttle", "256",
               "--time", "1", "--warmup-messages", "0", "--journals", "1,2", "--quiet"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = orjson.loads(captured.out.splitlines()[-1])
    assert list(result["phases"]) == ["journals-1", "journals-2"]
    assert all(ph["ops"] > 0 and ph["errors"] == 0 for ph in result["phases"].values())
    assert result["figures"]["journals_ratio"] > 0
    assert result["figures"]["journals_compared"] == "2 vs 1"
    assert "journals_ratio:" in captured.err  # the summary prints it
    # the two-journal bookie wrote both journals (2 ledgers: ids of both parities)
    for journal in ("journal", "journal-1"):
        files = glob.glob(os.path.join(tmp_path, "journals-2", "bookie-0", journal, "current", "*.txn"))
        assert files, journal
    assert not os.path.exists(os.path.join(tmp_path, "journals-1", "bookie-0", "journal-1"))


@pytest.mark.parametrize("argv, message", [
    (["--metadata", "lmdb:///x", "--journals", "1,2"], "--journals sets up local bookies"),
    (["--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--journals", "0"],
     "--journals: each journal count must be 1 to 16"),
    (["--localbookie", "1", "--ensemble", "1", "--quorum", "1", "--journals", "2,2"],
     "--journals: a journal count is named twice"),
])
def test_bad_journal_counts_are_one_clear_line(capsys, argv, message):
    assert main(["bench", "writes", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
