"""The ZooKeeper harness shipped for users' tests (bookie.testing.zookeeper) cleans up after an
owner that is killed: its Java server does not outlive the process that started it."""

import os
import signal
import subprocess
import sys
import time

OWNER = """
import time
from bookie.testing.zookeeper import ZooKeeperServer
server = ZooKeeperServer().start()
print(server._process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_java_server_dies_with_an_owner_killed_by_sigkill():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    java = None
    try:
        java = int(owner.stdout.readline())
        assert _alive(java)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 30
        while _alive(java) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(java), "the ZooKeeper server outlived its SIGKILLed owner"
    finally:
        owner.kill()
        if java is not None and _alive(java):
            os.kill(java, signal.SIGKILL)
