"""``bookie bench rereplication`` (bench/lost_bookie.py): a small run end to end, and its bad
options as one line, exit status 2."""

from __future__ import annotations

import orjson
import pytest

from bookie.appliance.cli import main


def test_bench_rereplication_heals_every_ledger_of_the_lost_bookie(capsys, tmp_path):
    rc = main(["bench", "rereplication", "--ledgers", "3", "--entries", "5", "--open-ledgers", "1",
               "--data-dir", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    result = orjson.loads(out[0])
    assert result["ledgers"] == 3 and result["healed"] == 3 and result["failed"] == 0
    assert result["still_named"] == 0 and result["ledgers_per_s"] > 0 and result["mb_per_s"] >= 0


@pytest.mark.parametrize("argv, message", [
    (["--ledgers", "0"], "must be positive"),
    (["--bookies-left", "2"], "--bookies-left must be at least 3"),
    (["--ledgers", "2", "--open-ledgers", "3"], "--open-ledgers must be between 0 and --ledgers"),
])
def test_bench_rereplication_bad_options_are_one_clear_line(capsys, argv, message):
    assert main(["bench", "rereplication", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bookie bench: ") and message in err[0]
