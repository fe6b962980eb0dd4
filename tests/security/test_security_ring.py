"""The add -> journal ring has no name (storage/ring.py: a memfd the workers inherit): nothing of a
bookie is in /dev/shm while it runs or after it is SIGKILLed, only the bookie's own processes
hold the ring, and its size is sealed."""

import fcntl
import os
import signal
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from bookie.storage.ring import DATA_OFFSET, Ring

KEY = b"ring-test-master-key"


def shm_of(port: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if f"-{port}-" in n or f"-{port}." in n] \
        if os.path.isdir("/dev/shm") else []


def ring_fds(pid: int, port: int) -> list[str]:
    """/proc/PID/fd/N paths of process ``pid`` that are the bookie's ring memfd."""
    out = []
    for n in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{n}").startswith(f"/memfd:bookie-{port}-ring"):
                out.append(f"/proc/{pid}/fd/{n}")
        except OSError:
            pass
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_sigkilled_bookie_leaves_nothing_in_dev_shm(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path), conf={"flushInterval": 50}) as ens:
        port = ens.ports[0]
        create_ledgers(ens.metadata_uri, [5], KEY)  # a bookie stores only ids its store knows
        with RawBookieClient(ens.bookies[0]) as c:
            assert c.add(5, [make_entry(5, i, b"x" * 100) for i in range(20)], KEY) == Status.OK
        assert shm_of(port) == []  # nothing with a name, even while it runs
        sup = ens.procs[0].pid
        workers = {role: ens.worker_pid(0, role) for role in ("journal", "add", "read", "gc")}
        assert ring_fds(sup, port)  # the supervisor keeps the descriptor (and its mmap's dup)
        for role in ("journal", "add", "read", "gc"):  # the workers that need it map it
            with open(f"/proc/{workers[role]}/maps") as f:
                mapped = f"memfd:bookie-{port}-ring" in f.read()
            assert mapped == (role != "gc"), role
        assert ring_fds(workers["gc"], port) == []  # not handed to a worker that needs none
        os.kill(sup, signal.SIGKILL)  # the supervisor alone: its workers follow (PDEATHSIG)
        ens.procs[0].wait(10)
        deadline = time.monotonic() + 15
        while any(alive(p) for p in workers.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in workers.values())
        assert shm_of(port) == []


def test_the_ring_size_is_sealed_and_the_descriptor_is_not_inherited_by_accident():
    ring = Ring.create_memfd("bookie-test-ring", 4096)
    try:
        assert ring.address == f"fd:{ring.fd}"
        assert not os.get_inheritable(ring.fd)  # only pass_fds hands it to a worker
        seals = fcntl.fcntl(ring.fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
        with pytest.raises(PermissionError):
            os.ftruncate(ring.fd, 0)
        # another mapping of the same memory, as a worker makes from the inherited descriptor
        other = Ring.attach(f"fd:{os.dup(ring.fd)}")
        ring.put(0, [b"hello"])
        assert bytes(other.slices(0, 5)[0]) == b"hello"
        assert other.capacity == 4096 and os.fstat(ring.fd).st_size == DATA_OFFSET + 4096
        other.close()
    finally:
        ring.close()
    assert ring.fd is None
