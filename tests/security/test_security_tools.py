"""Operator tools against a CURVE bookie: ``bookie shell`` and ``bookie bench`` take the client's
keys (``--client-conf FILE``, ``--set KEY=VALUE``); with an enrolled writer's they work, without
them they fail with one line, and a bad client key is refused before anything starts."""

import os
import subprocess
import sys

import pytest
import zmq.auth

from bookie.testing import LocalBookies


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


@pytest.fixture(scope="module")
def ens(keys):
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": keys["clients"],
            "flushInterval": 50}
    with LocalBookies(1, conf=conf) as e:
        yield e


def bookie(*args, timeout_s=60):
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True, text=True,
                          timeout=timeout_s)


SIMPLE = ("shell", "simpletest", "--ensemble-size", "1", "--write-quorum", "1",
          "--ack-quorum", "1", "--entries", "5")


def test_simpletest_succeeds_with_the_writers_client_conf(ens, keys):
    r = bookie(*SIMPLE, "--metadata", ens.metadata_uri, "--client-conf", keys["conf"])
    assert r.returncode == 0, r.stderr
    assert "simpletest: OK: 5 entries" in r.stdout


def test_simpletest_fails_with_one_line_without_keys(ens):
    # short timeouts, given the same way: no answer ever comes from a CURVE bookie
    r = bookie(*SIMPLE, "--metadata", ens.metadata_uri, "--set", "addEntryTimeout=1",
               "--set", "operationTimeout=4")
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "simpletest failed" in lines[0], r.stderr
    assert "if the bookies speak CURVE, pass an enrolled key" in lines[0]
    assert "Traceback" not in r.stderr


def test_bench_writes_runs_with_the_writers_keys_and_fails_without(ens, keys):
    common = ("bench", "writes", "--metadata", ens.metadata_uri, "--ensemble", "1",
              "--quorum", "1", "--time", "1", "--warmup-messages", "0", "--entrysize", "100",
              "--throttle", "100", "--quiet")
    r = bookie(*common, "--set", f"curveSecretKeyFile={keys['alice'][1]}",
               "--set", f"curveServerKeys={keys['bookie'][0]}")
    assert r.returncode == 0, r.stderr
    assert '"tool":"writes"' in r.stdout
    r = bookie(*common, "--timeout", "3", "--set", "addEntryTimeout=1")
    assert r.returncode != 0
    assert "if the bookies speak CURVE, pass an enrolled key" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


RECOVER = ("shell", "recover", "127.0.0.1:1")
BENCH = ("bench", "writes", "--time", "1")


@pytest.mark.parametrize("tool, argv, complaint", [
    (SIMPLE, ("--set", "noSuchKey=1"), "unknown client configuration key 'noSuchKey'"),
    (BENCH, ("--set", "readTimeout=soon"), "readTimeout='soon' is not a number"),
    (RECOVER, ("--set", "speculativeReadTimeout=-5"), "speculativeReadTimeout=-5: must be >= 0"),
    (BENCH, ("--set", "readTimeout"), "expected KEY=VALUE"),
    (RECOVER, ("--client-conf", "/nonexistent/client.conf"), "No such file or directory"),
    (SIMPLE, ("--set", "curveSecretKeyFile=/nonexistent"), "go together"),
], ids=["unknown", "not-a-number", "out-of-range", "no-equals", "no-file", "half-curve"])
def test_a_bad_client_key_is_one_line_and_exit_2(tool, argv, complaint):
    r = bookie(*tool, "--metadata", "lmdb:///nonexistent/store", *argv, timeout_s=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and complaint in r.stderr, r.stderr
