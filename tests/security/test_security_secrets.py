"""Secrets stay out of configuration dumps and process arguments (issue 22, finding 6).

Against a real bookie whose configuration holds ``autoRecoveryLedgerPasswords``: the admin API's
``server_config`` names the key but never its value; ``bookie run --set`` of that key is refused
in one line, exit status 2, naming ``autoRecoveryLedgerPasswordsFile``, before anything starts;
the file-based key is read with the checks of every secret file.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys

import pytest

from bookie.testing import LocalBookies
from bookie.workers.config import HIDDEN, BookieConfig, ConfigError

PASSWORD = "hunter2-recovery-fallback"


@pytest.fixture(scope="module")
def with_password(tmp_path_factory):
    d = tmp_path_factory.mktemp("secrets")
    with LocalBookies(1, base_dir=str(d / "e"), admin_http=True,
                      conf={"autoRecoveryLedgerPasswords": PASSWORD}) as e:
        yield e


def get(ens, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_server_config_names_the_recovery_passwords_but_never_shows_them(with_password):
    status, raw = get(with_password, "/api/v1/config/server_config")
    assert status == 200
    assert PASSWORD.encode() not in raw
    conf = json.loads(raw)
    assert conf["autoRecoveryLedgerPasswords"] == HIDDEN
    assert conf["autoRecoveryLedgerPasswordsFile"] == ""


def test_the_fixture_passed_the_password_in_a_private_file_not_on_the_command_line(with_password):
    pid = with_password.procs[0].pid
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert PASSWORD.encode() not in f.read()
    path = os.path.join(with_password.bookie_dir(0), "secret.conf")
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_set_of_a_secret_key_is_refused_in_one_line_naming_the_file_key(tmp_path):
    journal, ledgers = tmp_path / "j", tmp_path / "l"
    journal.mkdir()
    ledgers.mkdir()
    p = subprocess.run(
        [sys.executable, "-m", "bookie", "run", "--set", f"journalDirectory={journal}",
         "--set", f"ledgerDirectories={ledgers}", "--set", "bookiePort=0",
         "--set", f"autoRecoveryLedgerPasswords={PASSWORD}"],
        capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "autoRecoveryLedgerPasswordsFile" in lines[0], p.stderr
    assert PASSWORD not in p.stderr and "Traceback" not in p.stderr


def test_the_passwords_file_adds_its_lines_and_must_be_private(tmp_path):
    path = tmp_path / "passwords"
    path.write_text("first\n\nsecond one\n")
    os.chmod(path, 0o600)
    conf = BookieConfig.from_mapping({"ledgerDirectories": str(tmp_path), "journalDirectory": str(tmp_path),
                                      "autoRecoveryLedgerPasswords": "a,b",
                                      "autoRecoveryLedgerPasswordsFile": str(path)})
    assert conf.autorecovery_passwords() == [b"a", b"b", b"first", b"second one"]
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="autoRecoveryLedgerPasswordsFile: .* chmod 600"):
        BookieConfig.from_mapping({"ledgerDirectories": str(tmp_path), "journalDirectory": str(tmp_path),
                                   "autoRecoveryLedgerPasswordsFile": str(path)})
