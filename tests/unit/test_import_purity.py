"""The pure rules load no I/O library (issue 44 item 4): every ``bookie.core.*`` and
``bookie.client.protocol.*`` module, imported in a fresh interpreter, leaves ZeroMQ, LMDB and
ZooKeeper's client (kazoo) unloaded.  So do ``bookie.wire`` (the codec; its socket helpers are
``bookie.wire_sockets``) and ``bookie.metadata`` (kazoo comes with a ZooKeeper store, or with
``ZkSecurity`` when asked for)."""

from __future__ import annotations

import json
import subprocess
import sys

IO_LIBRARIES = ("zmq", "lmdb", "kazoo")

_PROBE = """
import importlib, json, pkgutil, sys
import bookie.core, bookie.client.protocol
names = ["bookie.wire", "bookie.metadata"]
for pkg in (bookie.core, bookie.client.protocol):
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
loaded = {}
for name in names:
    importlib.import_module(name)
    for lib in sys.argv[1:]:
        if lib in sys.modules and lib not in loaded:
            loaded[lib] = name
print(json.dumps({"modules": names, "loaded": loaded}))
"""


def _probe() -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, *IO_LIBRARIES], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_the_pure_modules_load_no_io_library():
    got = _probe()
    assert len(got["modules"]) > 20  # every module of core/ and client/protocol/ was imported
    assert got["loaded"] == {}, f"loaded (library: first module after which it was) {got['loaded']}"


def test_zookeeper_security_is_still_a_name_of_the_metadata_package():
    from bookie.metadata import ZkSecurity, load_zk_security
    from bookie.metadata.zk_acl import ZkSecurity as defined, load_zk_security as loader
    assert (ZkSecurity, load_zk_security) == (defined, loader)
