"""Run ``bookie ...`` as another user, the way an operator's shell would, from a suite that runs
as root: the interpreter here may live where that user cannot read (root's home), so the child
imports what the command needs, then drops to the user in-process (groups, gid, uid) and runs
the command line."""

import pwd
import subprocess
import sys

PRELUDE = """
import os, sys
from bookie.appliance import cli, supervisor
from bookie.appliance.shell import disk, main as shell_main, recovery
from bookie.metadata import embedded, zk
import kazoo.client, lmdb, lmdb._envid, orjson, zmq
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
sys.exit(cli.main(sys.argv[3:]))
"""


def run_as(user: str, *argv: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``bookie ARGV`` as ``user``; its exit status, stdout and stderr."""
    entry = pwd.getpwnam(user)
    return subprocess.run([sys.executable, "-c", PRELUDE, str(entry.pw_uid), str(entry.pw_gid),
                           *argv], capture_output=True, text=True, timeout=timeout_s)
