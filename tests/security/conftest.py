"""The security suite's shared bookie: one process for the key and host tests (the default run
starts as few bookies as it can)."""

import os
import tempfile

import pytest

from bookie.testing import LocalBookies


@pytest.fixture(scope="session")
def secure_bookie():
    """One bookie with an embedded metadata store, under a world-searchable parent directory (as
    /var/lib is), so that only the bookie's own modes stand between other users and its files."""
    base = tempfile.mkdtemp(prefix="bookie-host-")
    os.chmod(base, 0o755)
    with LocalBookies(1, base_dir=base, conf={"flushInterval": 50}) as e:
        for d in ("journal", "ledgers"):
            os.chmod(os.path.join(e.bookie_dir(0), d), 0o755)  # as an operator might leave them
        os.chmod(e.bookie_dir(0), 0o755)
        yield e


@pytest.fixture(scope="module")
def ens(keys):
    """One CURVE bookie, for a module whose ``keys`` fixture makes its keys: ``keys["bookie"]``
    the bookie's (public, secret) key files, ``keys["clients"]`` the enrolment directory."""
    conf = {"curveSecretKeyFile": keys["bookie"][1], "curveClientKeysDirectory": keys["clients"],
            "flushInterval": 50}
    with LocalBookies(1, conf=conf) as e:
        yield e
