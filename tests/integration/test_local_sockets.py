"""Local sockets (issue 40 items 1-4): same-host clients reach a bookie over its Unix sockets,
the kernel vouching for both ends; nothing a process of another user answers is believed.

Real bookies (LocalBookies), real clients; the suite runs as root, and ``nobody`` is the other
user: a child that imports what it needs as root, then drops to nobody (tests/helpers/as_user.py
does the same for ``bookie`` commands).
"""

import json
import os
import pwd
import shutil
import subprocess
import sys

import pytest
import zmq

from bookie import wire
from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Status
from zsockets import long_poll

KEY = b"local-sockets-key"
PLACES = 400
SHARE = PLACES // 4
NOBODY = pwd.getpwnam("nobody")

AS_NOBODY = """
import json, os, sys, time
import zmq
from bookie import wire
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
args = json.loads(sys.argv[3])
"""


def as_nobody(script: str, **args) -> subprocess.Popen:
    """``script`` run as nobody (after AS_NOBODY: ``args`` is the dict given), its stdout piped."""
    assert os.geteuid() == 0, "these tests run as root (as CI does) to act as another user"
    return subprocess.Popen([sys.executable, "-c", AS_NOBODY + script, str(NOBODY.pw_uid),
                             str(NOBODY.pw_gid), json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tcp_connections(ports) -> int:
    """ESTABLISHED TCP connections on this host (this network namespace) to or from ``ports``."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local, remote, state = cols[1], cols[2], cols[3]
            if state == "01" and (int(local.rsplit(":", 1)[1], 16) in ports
                                  or int(remote.rsplit(":", 1)[1], 16) in ports):
                n += 1
    return n


@pytest.fixture(scope="module")
def ens():
    conf = {"flushInterval": 50, "maxPendingReadRequestsPerThread": PLACES}
    with LocalBookies(1, conf=conf) as e:
        yield e


def local_paths(ens, i: int = 0) -> tuple[str, str]:
    d = os.path.join(ens.local_socket_parent(), str(i))
    return os.path.join(d, f"{ens.ports[i]}.add"), os.path.join(d, f"{ens.ports[i]}.read")


def write_and_read(ens, **config) -> int:
    """Write and read a ledger with a BookKeeper client of ``config``; the TCP connections to
    the bookie seen while the client was open."""
    with BookKeeper(ens.metadata_uri, config) as bk:
        lh = bk.create_ledger(1, 1, 1, password=KEY)
        for i in range(5):
            lh.add_entry(b"e%d" % i)
        seen = tcp_connections({ens.ports[0], ens.ports[0] + 1})
        assert [e.data for e in lh.read_entries(0, 4)] == [b"e%d" % i for i in range(5)]
        lh.close()
    return seen


def test_a_local_client_writes_and_reads_over_the_unix_sockets_with_no_tcp_connection(ens):
    assert write_and_read(ens) == 0


def test_use_local_sockets_false_uses_tcp_with_curve(ens):
    assert write_and_read(ens, useLocalSockets=False) >= 1


def test_raw_client_keeps_tcp_unless_asked(ens):
    with RawBookieClient(ens.bookies[0]) as tcp, RawBookieClient(ens.bookies[0], local=True) as local:
        assert tcp.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
        assert local.add_sock.get(zmq.LAST_ENDPOINT) == b"ipc://" + local_paths(ens)[0].encode()
        assert local.read_sock.get(zmq.LAST_ENDPOINT) == b"ipc://" + local_paths(ens)[1].encode()
        assert local.info()["bookie_id"] == tcp.info()["bookie_id"] == ens.bookies[0]


def test_sockets_are_open_to_every_uid_in_a_directory_only_the_bookie_writes(ens):
    add, read = local_paths(ens)
    d = os.path.dirname(add)
    st = os.lstat(d)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o755
    for path in (add, read):
        assert os.lstat(path).st_mode & 0o777 == 0o777


FLOOD = """
s = zmq.Context().socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.connect("ipc://" + args["read"])
for rid in range(args["n"]):
    s.send_multipart([wire.pack_header(wire.Op.READ_LAC, int(wire.Flag.LONG_POLL), rid, args["ledger"]),
                      wire.LONG_POLL_BODY.pack(5, 60_000)])
def statuses(n, timeout_ms):
    out = []
    while len(out) < n and s.poll(timeout_ms):
        out.append(wire.unpack_header(s.recv_multipart()[0])[1])
    return out
print(json.dumps(statuses(1, 1500)), flush=True)  # [] while parked
print(json.dumps(statuses(args["n"], 30_000)), flush=True)
"""


def test_a_flooder_of_one_uid_leaves_long_poll_places_for_another_uid(ens):
    ledger = 21
    create_ledgers(ens.metadata_uri, [ledger], KEY)
    add, read = local_paths(ens)
    with RawBookieClient(ens.bookies[0], timeout_s=30, local=True) as writer:
        assert writer.add(ledger, [make_entry(ledger, 0, b"e0")], KEY) == Status.OK
        ctx = zmq.Context()
        try:
            conns = []
            for _ in range(4):  # root's connections, each asking a whole share
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(f"ipc://{read}")
                conns.append(s)
            rid = 0
            for s in conns:
                for _ in range(SHARE):
                    s.send_multipart(long_poll(rid, ledger))
                    rid += 1
                got = []
                while len(got) < SHARE and s.poll(1500):
                    got.append(wire.unpack_header(s.recv_multipart()[0])[1])
                assert got == ([] if s is conns[0] else [Status.TOO_MANY_REQUESTS] * SHARE)
            other = as_nobody(FLOOD, read=read, n=SHARE, ledger=ledger)
            try:
                assert json.loads(other.stdout.readline()) == []  # nobody's uid parks its own
                assert writer.write_lac(ledger, 6, KEY) == Status.OK
                assert json.loads(other.stdout.readline()) == [Status.OK] * SHARE
            finally:
                other.kill()
                other.wait(10)
        finally:
            ctx.destroy(linger=0)


IMPOSTOR = """
s = zmq.Context().socket(zmq.ROUTER)
s.setsockopt(zmq.LINGER, 0)
s.bind("ipc://" + args["path"])
os.chmod(args["path"], 0o777)
print("bound", flush=True)
n = 0
while s.poll(int(args["wait_s"] * 1000)):
    frames = s.recv_multipart()
    n += 1
print(n, flush=True)
"""


@pytest.fixture
def own_bookie(tmp_path):
    """A bookie of its own, for the tests that break its local sockets."""
    with LocalBookies(1, base_dir=str(tmp_path / "b"), conf={"flushInterval": 50}) as e:
        yield e


def test_a_socket_directory_another_user_owns_is_refused_and_nothing_there_is_believed(own_bookie):
    ens = own_bookie
    add, read = local_paths(ens)
    d = os.path.dirname(add)
    os.chown(d, NOBODY.pw_uid, -1)  # nobody owns the directory: could have made any socket
    os.unlink(add)
    impostor = as_nobody(IMPOSTOR, path=add, wait_s=3.0)
    try:
        assert impostor.stdout.readline().strip() == "bound"
        ledger = 31
        create_ledgers(ens.metadata_uri, [ledger], KEY)
        with RawBookieClient(ens.bookies[0], timeout_s=20, local=True) as c:
            assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")  # refused: TCP
            assert c.add(ledger, [make_entry(ledger, 0, b"real")], KEY) == Status.OK
            assert c.read(ledger, 0) == (Status.OK, [make_entry(ledger, 0, b"real")])
        assert impostor.stdout.readline().strip() == "0"  # nothing was ever sent to it
    finally:
        impostor.kill()
        impostor.wait(10)


def test_a_socket_another_user_owns_is_refused(own_bookie, caplog):
    add, _ = local_paths(own_bookie)
    os.chown(add, NOBODY.pw_uid, -1, follow_symlinks=False)
    with caplog.at_level("WARNING", logger="bookie.client"):
        with RawBookieClient(own_bookie.bookies[0], local=True) as c:
            assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
            assert c.read_sock.get(zmq.LAST_ENDPOINT).startswith(b"ipc://")  # its own checks
            assert c.info()["bookie_id"] == own_bookie.bookies[0]
    said = [r for r in caplog.records if "local socket refused" in r.getMessage()]
    assert len(said) == 1
    assert f"is owned by uid {NOBODY.pw_uid}, not the bookie's uid 0" in said[0].fields["reason"]


def test_a_link_in_place_of_the_directory_is_refused(own_bookie, caplog):
    add, _ = local_paths(own_bookie)
    d = os.path.dirname(add)
    real = d + "-real"
    os.rename(d, real)
    os.symlink(real, d)
    with caplog.at_level("WARNING", logger="bookie.client"):
        with RawBookieClient(own_bookie.bookies[0], local=True) as c:
            assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
            assert c.info()["bookie_id"] == own_bookie.bookies[0]
    reasons = [r.fields["reason"] for r in caplog.records if "local socket refused" in r.getMessage()]
    assert reasons and all("is a symbolic link" in r for r in reasons), reasons


def test_a_registered_socket_path_that_does_not_exist_is_refused(own_bookie, caplog):
    add, _ = local_paths(own_bookie)
    os.unlink(add)
    with caplog.at_level("WARNING", logger="bookie.client"):
        with RawBookieClient(own_bookie.bookies[0], local=True) as c:
            assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
            assert c.info()["bookie_id"] == own_bookie.bookies[0]
    reasons = [r.fields["reason"] for r in caplog.records if "local socket refused" in r.getMessage()]
    assert reasons == [f"socket {add}: No such file or directory"]


def test_a_stale_socket_after_sigkill_is_removed_and_the_restarted_bookie_serves_there(own_bookie):
    ens = own_bookie
    add, read = local_paths(ens)
    ledger = 41
    create_ledgers(ens.metadata_uri, [ledger], KEY)
    with RawBookieClient(ens.bookies[0], local=True) as c:
        assert c.add(ledger, [make_entry(ledger, 0, b"before")], KEY) == Status.OK
    ens.kill(0)
    assert os.path.exists(add) and os.path.exists(read)  # left behind by SIGKILL
    ens.start(0)
    with RawBookieClient(ens.bookies[0], timeout_s=20, local=True) as c:
        assert c.add_sock.get(zmq.LAST_ENDPOINT) == b"ipc://" + add.encode()
        assert c.read(ledger, 0) == (Status.OK, [make_entry(ledger, 0, b"before")])
        assert c.add(ledger, [make_entry(ledger, 1, b"after")], KEY) == Status.OK


def test_a_worker_killed_and_restarted_binds_its_socket_again(own_bookie):
    ens = own_bookie
    ledger = 42
    create_ledgers(ens.metadata_uri, [ledger], KEY)
    ens.kill_worker(0, "read")
    with RawBookieClient(ens.bookies[0], timeout_s=30, local=True) as c:
        assert c.add(ledger, [make_entry(ledger, 0, b"x")], KEY) == Status.OK
        assert c.read(ledger, 0) == (Status.OK, [make_entry(ledger, 0, b"x")])


FENCE = """
s = zmq.Context().socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.connect("ipc://" + args["read"])
key = args["key"].encode()
for rid, flags, body in ((1, 0, []), (2, int(wire.Flag.FENCE), [key])):
    s.send_multipart([wire.pack_header(wire.Op.READ_LAC, flags, rid, args["ledger"]), *body])
    print(wire.unpack_header(s.recv_multipart()[0])[1] if s.poll(20_000) else "none", flush=True)
"""


def test_roles_by_uid_refuse_a_readers_fence(tmp_path):
    conf = {"flushInterval": 50, "localClientRoles": "0:writer,nobody:reader"}
    with LocalBookies(1, base_dir=str(tmp_path / "b"), conf=conf) as ens:
        ledger = 51
        create_ledgers(ens.metadata_uri, [ledger], KEY)
        with RawBookieClient(ens.bookies[0], timeout_s=20, local=True) as writer:
            assert writer.add(ledger, [make_entry(ledger, 0, b"e0")], KEY) == Status.OK
            reader = as_nobody(FENCE, read=local_paths(ens)[1], ledger=ledger, key=KEY.decode())
            out, err = reader.communicate(timeout=60)
            # a READ_LAC is the reader's; its fence is refused, and nothing is fenced
            assert out.split() == [str(int(Status.OK)), str(int(Status.UNAUTHORIZED))], err
            assert writer.add(ledger, [make_entry(ledger, 1, b"e1")], KEY) == Status.OK
            assert writer.fence(ledger, KEY) == Status.OK  # the writer's uid may fence


def test_an_enrolled_bookie_refuses_unmapped_local_uids_and_the_client_uses_tcp_with_its_key(
        tmp_path):
    import zmq.auth

    from bookie.client.auth import ClientCurve

    keys = tmp_path / "keys"
    keys.mkdir()
    bookie_key = zmq.auth.create_certificates(str(keys), "bookie")
    alice = zmq.auth.create_certificates(str(keys), "alice")
    (keys / "clients" / "writer").mkdir(parents=True)
    shutil.copy(alice[0], keys / "clients" / "writer" / "alice.key")
    conf = {"flushInterval": 50, "curveSecretKeyFile": bookie_key[1],
            "curveClientKeysDirectory": str(keys / "clients")}
    with LocalBookies(1, base_dir=str(tmp_path / "b"), conf=conf) as ens:
        ledger = 52
        create_ledgers(ens.metadata_uri, [ledger], KEY)
        with RawBookieClient(ens.bookies[0], timeout_s=20, curve=ClientCurve(alice[1]),
                             local=True) as c:
            assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
            assert c.add(ledger, [make_entry(ledger, 0, b"e0")], KEY) == Status.OK
        ctx = zmq.Context()
        try:  # past the client's checks, straight to the socket: the handshake is refused
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"ipc://{local_paths(ens)[0]}")
            s.send_multipart([wire.pack_header(wire.Op.INFO, 0, 1, 0)])
            assert not s.poll(1500)
        finally:
            ctx.destroy(linger=0)
        assert "local uid 0 has no role (localClientRoles); connection refused" in \
            open(ens.log_path(0)).read()


def _run(tmp_path, **keys) -> subprocess.CompletedProcess:
    from bookie.workers.ports import free_port_pair

    for d in ("j", "l"):
        (tmp_path / d).mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "bookie", "run", "--set", f"journalDirectory={tmp_path}/j",
            "--set", f"ledgerDirectories={tmp_path}/l", "--set", "metadataServiceUri=",
            "--set", f"bookiePort={free_port_pair('127.0.0.1')}"]
    for k, v in keys.items():
        argv += ["--set", f"{k}={v}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _refusal(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    return proc.stderr.strip().splitlines()[-1]


def test_a_socket_directory_of_another_owner_refuses_the_start(tmp_path):
    d = tmp_path / "sock"
    d.mkdir(mode=0o755)
    os.chown(d, NOBODY.pw_uid, -1)
    line = _refusal(_run(tmp_path, localSocketDirectory=str(d)))
    assert f"localSocketDirectory: {d} is owned by uid {NOBODY.pw_uid}, not the bookie's user" \
        in line, line


def test_a_link_as_the_socket_directory_refuses_the_start(tmp_path):
    (tmp_path / "real").mkdir(mode=0o755)
    os.symlink(tmp_path / "real", tmp_path / "sock")
    line = _refusal(_run(tmp_path, localSocketDirectory=str(tmp_path / "sock")))
    assert f"localSocketDirectory: {tmp_path}/sock is a symbolic link" in line, line


def test_a_socket_path_over_the_sun_path_limit_refuses_the_start(tmp_path):
    long = "/tmp/" + "d" * 110
    line = _refusal(_run(tmp_path, localSocketDirectory=long))
    assert "localSocketDirectory=" in line and "longer than 107 bytes" in line, line
    assert not os.path.exists(long)


def test_a_role_that_does_not_exist_refuses_the_start(tmp_path):
    line = _refusal(_run(tmp_path, localClientRoles="0:boss"))
    assert "localClientRoles" in line and "role 'boss' is not one of reader, writer, admin" in line


def test_a_client_that_pins_the_bookies_key_uses_tcp_where_the_pin_is_proved(ens, tmp_path):
    from bookie.client.auth import ClientCurve
    from bookie.storage.layout import PUBLIC_KEY_FIELD, cookie_in

    pin = tmp_path / "bookie.key"
    real = cookie_in(ens.journal_dirs(0)[0])[PUBLIC_KEY_FIELD]
    pin.write_text(f'metadata\ncurve\n    public-key = "{real}"\n')
    with RawBookieClient(ens.bookies[0], curve=ClientCurve(server_keys=str(pin)), local=True) as c:
        assert c.add_sock.get(zmq.LAST_ENDPOINT).startswith(b"tcp://")
        assert c.info()["bookie_id"] == ens.bookies[0]
