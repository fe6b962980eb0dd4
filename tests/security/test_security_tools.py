"""Operator tools against a CURVE bookie: ``bookie shell`` and ``bookie bench`` take the client's
keys (``--client-conf FILE``, ``--set KEY=VALUE``); with an enrolled writer's they work, without
them they fail with one line, and a bad client key is refused before anything starts."""

import os
import re
import subprocess
import sys

import pytest
import zmq.auth

from bookie.client.errors import InvalidArgumentError
from bookie.client.options import client_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("tools-curve")
    made = {name: zmq.auth.create_certificates(str(root), name) for name in ("bookie", "alice")}
    os.makedirs(root / "clients" / "writer")
    with open(made["alice"][0]) as src, open(root / "clients" / "writer" / "alice.key", "w") as dst:
        dst.write(src.read())
    made["clients"] = str(root / "clients")
    conf = root / "alice.conf"
    conf.write_text(f"# the writer alice\ncurveSecretKeyFile={made['alice'][1]}\n"
                    f"curveServerKeys: {made['bookie'][0]}\nreadTimeout=2\n")
    made["conf"] = str(conf)
    return made


def bookie(*args, timeout_s=60):
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True, text=True,
                          timeout=timeout_s)


SIMPLE = ("shell", "simpletest", "--ensemble-size", "1", "--write-quorum", "1",
          "--ack-quorum", "1", "--entries", "5")


def test_simpletest_and_bookieinfo_succeed_with_the_writers_client_conf(ens, keys):
    r = bookie(*SIMPLE, "--metadata", ens.metadata_uri, "--client-conf", keys["conf"])
    assert r.returncode == 0, r.stderr
    assert "simpletest: OK: 5 entries" in r.stdout
    r = bookie("shell", "bookieinfo", "--metadata", ens.metadata_uri, "--client-conf", keys["conf"])
    assert r.returncode == 0 and f"{ens.bookies[0]}: free" in r.stdout, r.stdout + r.stderr


def test_simpletest_fails_with_one_line_without_keys(ens):
    # short timeouts, given the same way: no answer ever comes from a CURVE bookie
    r = bookie(*SIMPLE, "--metadata", ens.metadata_uri, "--set", "addEntryTimeout=1",
               "--set", "operationTimeout=4")
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "simpletest failed" in lines[0], r.stderr
    # the writer's own reason names CURVE for a bookie that never answered, so the tool adds
    # no second hint
    assert "CURVE" in lines[0] and "curveSecretKeyFile" in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def test_bench_writes_runs_with_the_writers_keys_and_fails_without(ens, keys):
    common = ("bench", "writes", "--metadata", ens.metadata_uri, "--ensemble", "1",
              "--quorum", "1", "--time", "1", "--warmup-messages", "0", "--entrysize", "100",
              "--throttle", "100", "--quiet")
    r = bookie(*common, "--set", f"curveSecretKeyFile={keys['alice'][1]}",
               "--set", f"curveServerKeys={keys['bookie'][0]}")
    assert r.returncode == 0, r.stderr
    assert '"tool":"writes"' in r.stdout
    r = bookie(*common, "--timeout", "2", "--set", "addEntryTimeout=1")
    assert r.returncode != 0
    assert "if the bookies speak CURVE, pass an enrolled key" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("tool, argv, complaint", [
    (SIMPLE, ("--set", "noSuchKey=1"), "unknown client configuration key 'noSuchKey'"),
    (("bench", "writes", "--time", "1"), ("--set", "readTimeout=soon"),
     "readTimeout='soon' is not a number"),
    (("shell", "recover", "127.0.0.1:1"), ("--client-conf", "/nonexistent/client.conf"),
     "No such file or directory"),
], ids=["simpletest", "bench-writes", "recover"])
def test_a_bad_client_key_is_one_line_and_exit_2(tool, argv, complaint):
    r = bookie(*tool, "--metadata", "lmdb:///nonexistent/store", *argv, timeout_s=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and complaint in r.stderr, r.stderr


@pytest.mark.parametrize("conf_text, items, complaint", [
    ("", ["speculativeReadTimeout=-5"], "speculativeReadTimeout=-5: must be >= 0"),
    ("", ["readTimeout"], "expected KEY=VALUE"),
    ("", ["allowEmptyPassword=maybe"], "is not true or false"),
    ("readTimeout 5\n", [], ":1: expected key=value"),
    ("", ["curveSecretKeyFile=/nonexistent"], "curveSecretKeyFile=/nonexistent"),
], ids=["range", "no-equals", "bool", "bad-line", "bad-key-file"])
def test_client_keys_are_checked_before_a_tool_starts(tmp_path, conf_text, items, complaint):
    conf = tmp_path / "client.conf"
    conf.write_text(conf_text)
    with pytest.raises(InvalidArgumentError, match=re.escape(complaint)):
        client_keys(str(conf), items)


def test_set_overrides_the_file_and_values_are_typed(tmp_path):
    conf = tmp_path / "client.conf"
    conf.write_text("! comment\nreadTimeout=2\nspeculativeReadTimeout: 100\npasswd=pw\n")
    assert client_keys(str(conf), ["readTimeout=0.5", "allowEmptyPassword=yes"]) == {
        "readTimeout": 0.5, "speculativeReadTimeout": 100, "passwd": "pw",
        "allowEmptyPassword": True}


@pytest.mark.spark_slow
def test_bench_spark_counts_and_sinks_through_curve_with_the_writers_client_conf(ens, keys, tmp_path):
    out = tmp_path / "spark.jsonl"
    r = bookie("bench", "spark", "--metadata", ens.metadata_uri, "--client-conf", keys["conf"],
               "--entries", "2000", "--ensemble", "1", "--quorum", "1", "--cores", "1",
               "--repeat", "0", "--json-out", str(out), timeout_s=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "spark count cold" in r.stderr and "spark sink" in r.stderr, r.stderr[-3000:]
    # --json-out appends the line stdout printed
    assert out.read_text().splitlines() == [r.stdout.strip().splitlines()[-1]]
