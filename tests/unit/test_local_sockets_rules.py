"""The pure parts of the local sockets (issue 40): the roles key, the bookie's directory rules,
the client's trust checks on real files, and the ZAP handler's reading of SO_PEERCRED."""

import os
import pwd
import shutil
import socket
import tempfile

import pytest

from bookie.client import local_sockets as client_side
from bookie.workers import local_sockets
from bookie.workers.auth import ZapHandler


def test_roles_take_uids_and_user_names():
    root = pwd.getpwuid(0).pw_name
    assert local_sockets.parse_roles(f"{root}:admin, 1000:reader,") == {0: "admin", 1000: "reader"}
    assert local_sockets.parse_roles("") == {}


@pytest.mark.parametrize("text, complaint", [
    ("0:boss", "role 'boss' is not one of reader, writer, admin"),
    ("no-such-user-here:reader", "no user 'no-such-user-here' on this host"),
    ("0:reader,0:admin", "uid 0 is given a role twice"),
    ("reader", "is not UID:ROLE or USER:ROLE"),
])
def test_a_bad_role_entry_is_one_line_naming_it(text, complaint):
    assert complaint in local_sockets.roles_problem(text)


def test_socket_paths_and_the_sun_path_limit(tmp_path):
    assert local_sockets.socket_paths("/run/bookie", 3181) == ("/run/bookie/3181.add",
                                                              "/run/bookie/3181.read")
    with pytest.raises(local_sockets.LocalSocketError, match="longer than 107 bytes"):
        local_sockets.prepare(str(tmp_path / ("d" * 120)), 3181)


def test_the_default_directory_unusable_is_a_warning_and_tcp_only(tmp_path, monkeypatch):
    monkeypatch.setattr(local_sockets, "DEFAULT_DIRECTORY", str(tmp_path / "no" / "such"))
    directory, warning = local_sockets.prepare("", 3181)
    assert directory == "" and "cannot make it" in warning and "TCP only" in warning
    assert local_sockets.prepare("none", 3181) == ("", None)


def test_a_group_writable_directory_is_refused(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(d, 0o775)
    with pytest.raises(local_sockets.LocalSocketError, match="writable by group or others"):
        local_sockets.prepare(str(d), 3181)


@pytest.fixture
def searchable():
    """A directory every user may enter (the suite's tmp_path may be root's 0700)."""
    d = tempfile.mkdtemp(prefix="bk-ls-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_stale_socket_is_removed_and_a_listening_one_refused(searchable):
    d = os.path.join(searchable, "s")
    add = local_sockets.socket_paths(str(d), 3181)[0]
    assert local_sockets.prepare(str(d), 3181) == (str(d), None)
    assert os.stat(d).st_mode & 0o777 == 0o755
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(add)
        s.listen()
        with pytest.raises(local_sockets.LocalSocketError, match="something listens on"):
            local_sockets.prepare(str(d), 3181)
    assert os.path.exists(add)  # closed, not unlinked: stale now
    assert local_sockets.prepare(str(d), 3181) == (str(d), None)
    assert not os.path.exists(add)
    with open(add, "w"):
        pass
    with pytest.raises(local_sockets.LocalSocketError, match="is not a socket"):
        local_sockets.prepare(str(d), 3181)


def _published(tmp_path):
    d = tmp_path / "s"
    d.mkdir(mode=0o755)
    add, read = local_sockets.socket_paths(str(d), 1)
    for path in (add, read):
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path)
    info = {client_side.LOCAL_FIELD: client_side.published(str(d), add, read, None)}
    return client_side.parse(info)


def test_the_client_trusts_a_socket_of_the_registered_uid_in_its_directory(tmp_path):
    local = _published(tmp_path)
    assert client_side.problem(local, local.add) is None
    assert client_side.choose(local, "b", 1, True) == local.read
    assert client_side.choose(local, "b", 1, False) is None  # useLocalSockets=false


def test_the_client_refuses_what_it_cannot_trust(tmp_path):
    local = _published(tmp_path)
    assert client_side.problem(local._replace(host="other:host"), local.add) == \
        "registered on another host"
    assert "has no role there" in client_side.problem(local._replace(uids=(12345,)), local.add)
    assert "not the bookie's uid 12345" in client_side.problem(local._replace(uid=12345), local.add)
    assert "is not in the registered directory" in client_side.problem(local, "/tmp/x.add")
    os.chmod(local.directory, 0o777)
    assert "writable by group or others" in client_side.problem(local, local.add)
    os.chmod(local.directory, 0o755)
    os.unlink(local.add)
    assert client_side.problem(local, local.add).endswith("No such file or directory")


@pytest.mark.parametrize("info", [None, {}, {"local_sockets": "x"},
                                  {"local_sockets": {"directory": "/d", "add": "/d/a"}},
                                  {"local_sockets": {"directory": "/d", "add": "/d/a", "read": "/d/r",
                                                     "uid": 0, "host": "h", "uids": ["x"]}}])
def test_a_malformed_registration_field_means_no_local_sockets(info):
    assert client_side.parse(info) is None


def test_the_host_identity_is_machine_id_and_boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    assert client_side.host_identity().endswith(":" + boot)


class _Zap:
    local_principal = ZapHandler.local_principal


@pytest.mark.parametrize("local, enrolment, address, principal", [
    (None, None, b"localhost:1000:1000:42", b"uid:1000"),  # no roles, no enrolment: any uid
    ({0: "admin"}, None, b"localhost:0:0:42", b"uid:0"),
    ({0: "admin"}, None, b"localhost:1000:1000:42", b""),  # not listed: refused
    (None, object(), b"localhost:0:0:42", b""),  # enrolment on, no roles: none admitted
    (None, None, b"garbage", b""),
])
def test_the_zap_handler_names_the_uid_the_kernel_gave(local, enrolment, address, principal):
    zap = _Zap()
    zap.local, zap.enrolment = local, enrolment
    assert zap.local_principal(address)[0] == principal


def test_a_directory_other_users_cannot_reach_is_refused(tmp_path):
    os.chmod(tmp_path, 0o700)  # as pytest's own temp dirs are
    with pytest.raises(local_sockets.LocalSocketError, match="is not searchable by others"):
        local_sockets.prepare(str(tmp_path / "s"), 3181)
