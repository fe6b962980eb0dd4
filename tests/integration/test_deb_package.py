"""The appliance as operators install it: the Debian package, its unit, its configuration.

The default suite checks the unit and the example configuration in seconds (systemd-analyze
works on a unit file without a running systemd). The whole round, opt-in with ``-m package``
(it builds the package, minutes with PyPI, and needs root): build, ``apt-get install``, run the
installed unit's ExecStart as the ``bookie`` user with the installed configuration (inside an
emulation of the unit's file-system sandbox), a smoke write/read through the installed client;
where systemd-nspawn is installed, the unit under a real systemd in a container (serve, restart
after SIGKILL, clean stop); reinstall, remove (data kept), purge (data gone).
``BOOKIE_DEB=path/bookie_<version>_<arch>.deb`` skips the build. The round also runs lintian
on the package (no error, no warning), checks its version (the project's, with the build
suffix), and removes it while a bookie started by hand runs (prerm stops it).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import urllib.request

import pytest

from bookie.metadata.uri import parse_uri
from bookie.workers.config import BookieConfig

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNIT = os.path.join(REPO, "systemd", "bookie.service")
CONF_EXAMPLE = os.path.join(REPO, "systemd", "bookie.conf.example")
MAINTAINER_SCRIPTS = [os.path.join(REPO, "systemd", "debian", name)
                      for name in ("postinst", "prerm", "postrm")]
MAX_EXPOSURE = 2.5

@pytest.fixture
def analyze():
    """systemd-analyze, which tests/setup.sh installs: missing, the unit checks fail, not skip."""
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: run tests/setup.sh"


needs_analyze = pytest.mark.usefixtures("analyze")


def unit_settings(text: str) -> dict[str, list[str]]:
    """``Key`` -> every value it is given in a unit file (sections flattened, comments dropped)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def exposure(unit_path: str) -> float:
    """systemd-analyze's overall exposure level of a unit file (0 safest, 10 worst)."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", unit_path],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", r.stdout)
    assert m, f"no exposure level in:\n{r.stdout}\n{r.stderr}"
    return float(m.group(1))


@pytest.fixture(scope="module")
def unit():
    with open(UNIT, encoding="utf-8") as f:
        return unit_settings(f.read())


# -- the unit file and the example configuration (default suite) -------------------------------

@needs_analyze
def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    # verify also checks that ExecStart exists: give it a root with the system's units and a
    # stand-in for the package's program (the package round verifies the installed unit).
    shutil.copytree("/lib/systemd/system", tmp_path / "lib" / "systemd" / "system", symlinks=True)
    shutil.copy(UNIT, tmp_path / "lib" / "systemd" / "system" / "bookie.service")
    program = tmp_path / "usr" / "lib" / "bookie" / "bin" / "bookie"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    r = subprocess.run(["systemd-analyze", "verify", f"--root={tmp_path}", "bookie.service"],
                       capture_output=True, text=True, timeout=60)
    # Warnings (an unknown or misspelt directive) exit 0 too: any output is a failure.
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


@needs_analyze
def test_the_units_security_exposure_is_at_most_2_5():
    assert exposure(UNIT) <= MAX_EXPOSURE


def test_the_unit_runs_the_packaged_program_by_absolute_path(unit):
    argv = shlex.split(unit["ExecStart"][0])
    assert argv == ["/usr/lib/bookie/bin/bookie", "run", "--conf", "/etc/bookie/bookie.conf"]
    assert unit["User"] == ["bookie"] and unit["Group"] == ["bookie"]


def test_the_unit_does_not_restart_what_a_restart_cannot_fix(unit):
    assert unit["Restart"] == ["on-failure"]
    # 2 configuration / layout / port in use, 3 corrupt journal, 4 failed fdatasync.
    assert {"2", "3", "4"} <= set(" ".join(unit["RestartPreventExitStatus"]).split())
    assert int(unit["StartLimitBurst"][0]) >= 1 and unit["StartLimitIntervalSec"]
    assert unit["KillSignal"] == ["SIGTERM"] and unit["KillMode"] == ["mixed"]


def test_the_unit_is_sandboxed_as_the_appliance_needs(unit):
    want = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
            "ProtectHome": "yes", "CapabilityBoundingSet": "", "UMask": "0077",
            "PrivateDevices": "yes", "LimitNOFILE": "65536", "LimitMEMLOCK": "0"}
    assert {k: unit.get(k, [None])[-1] for k in want} == want
    # What libzmq needs, learnt under systemd: netlink to list interfaces when it binds, and
    # the right to set its I/O threads' scheduling parameters (@resources); it aborts without.
    assert set(unit["RestrictAddressFamilies"][0].split()) == {"AF_INET", "AF_INET6", "AF_UNIX",
                                                                "AF_NETLINK"}
    assert not any("@resources" in value for value in unit["SystemCallFilter"])
    # Not ProcSubset=pid: the embedded store reads /proc/sys/kernel/random/boot_id.
    assert "ProcSubset" not in unit
    # The run directory where `bookie shell triggergc` on the host finds it (issue 33.7): the
    # bookie makes it in $RUNTIME_DIRECTORY, not in the private /tmp.  0755: the local sockets
    # are there too, for clients of every uid (issue 40); the run directory itself is 0700.
    assert unit["RuntimeDirectory"] == ["bookie"] and unit["RuntimeDirectoryMode"] == ["0755"]
    # No private user namespace: a local client's uid (SO_PEERCRED) must read as itself.
    assert "PrivateUsers" not in unit


def test_every_directory_the_example_configuration_names_is_writable_under_the_unit(unit):
    conf = BookieConfig.load(CONF_EXAMPLE, check_dirs=False)
    assert conf.warnings == []
    writable = [p.lstrip("-") for value in unit["ReadWritePaths"] for p in value.split()]
    needed = [conf.journal_dir, *conf.ledger_dirs, *conf.index_dirs, conf.stats_dir,
              parse_uri(conf.metadata_uri).path]
    for path in needed:
        assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable), path
    assert conf.listening_interface == "127.0.0.1"  # the embedded store serves this host only


@pytest.mark.parametrize("script", MAINTAINER_SCRIPTS, ids=os.path.basename)
def test_the_maintainer_scripts_are_posix_sh(script):
    assert os.access(script, os.X_OK)
    with open(script, encoding="utf-8") as f:
        assert f.readline().strip() == "#!/bin/sh"
    r = subprocess.run(["sh", "-n", script], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stderr) == (0, "")


# -- the whole round: build, install, serve, remove, purge (opt-in) ----------------------------

BUILD_TIMEOUT_S = 1500
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=300"]
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
DATA = "/var/lib/bookie"
SMOKE = """
from bookie.client import BookKeeper
with BookKeeper("lmdb:///var/lib/bookie/metadata") as bk:
    lh = bk.create_ledger(ensemble_size=1, write_quorum=1, ack_quorum=1, password=b"smoke")
    assert [lh.add_entry(b"entry-%d" % i) for i in range(10)] == list(range(10))
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, password=b"smoke")
    got = [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]
    assert got == [b"entry-%d" % i for i in range(10)], got
    print(f"smoke: ledger {lh.ledger_id}: wrote and read back {len(got)} entries")
"""


def sh(argv, timeout_s=300, check=True, env=None) -> subprocess.CompletedProcess:
    """Run a command, print it and its output (the install transcript), return the result."""
    print(f"$ {shlex.join(argv)}")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    out = "\n".join(line for line in (r.stdout + r.stderr).splitlines()
                    if not line.startswith("(Reading database"))
    print(out.rstrip() + (f"\n[exit status {r.returncode}]" if r.returncode else ""))
    if check:
        assert r.returncode == 0, f"{argv[0]} failed with status {r.returncode}"
    return r


def installed_state() -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "bookie"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def ports_free(*ports) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


# What the unit's ProtectSystem=strict, ReadWritePaths=/var/lib/bookie, PrivateTmp and
# ProtectHome do to the file system, made with a private mount namespace where no systemd runs:
# the bookie can then write only /var/lib/bookie, a fresh /tmp and the API trees (/dev/shm).
# An emulation, not systemd itself: other mounts of the host stay as they are.
FILE_SYSTEM_SANDBOX = """set -e
mount --bind /var/lib/bookie /var/lib/bookie
mount -t tmpfs -o mode=1777 tmpfs /tmp
for home in /home /root; do mount -t tmpfs -o mode=0755 tmpfs "$home"; done
mount -o remount,bind,ro /
exec "$@"
"""


def can_emulate_the_file_system_sandbox() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                        "mount -o remount,bind,ro / && ! test -w /etc"],
                       capture_output=True, timeout=30)
    return r.returncode == 0


def bookie_supervisor(ancestor: int) -> int | None:
    """The pid of the ``bookie run`` process below ``ancestor`` (runuser, perhaps under sh)."""
    queue = [ancestor]
    while queue:
        pid = queue.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            # The interpreter running the script; runuser's own command line names it too.
            if argv[1:3] == [b"/usr/lib/bookie/bin/bookie", b"run"]:
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                queue += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return None


# A real systemd, booted by systemd-nspawn on this host's own root (read-only, /var a fresh
# tmpfs, /var/lib/bookie bound in), with bookie.service as its only goal: the unit's sandbox
# (seccomp filter, private users, private /dev with /dev/shm, address families) applied by
# systemd itself. / is bound without its submounts first: nspawn needs an unpopulated /dev.
CONTAINER = """set -e
mount --bind / "$1"
exec systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --console=pipe \
    --private-network --machine="$2" -D "$1" --volatile=state --bind=/var/lib/bookie \
    -b -- systemd.unit=bookie.service
"""


def container_init(nspawn_pid: int) -> int | None:
    """The pid (on this host) of the container's systemd below ``nspawn_pid``."""
    queue = [nspawn_pid]
    while queue:
        pid = queue.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[0].endswith(b"/systemd") and b"systemd.unit=bookie.service" in argv:
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                queue += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return None


def in_container(init_pid: int, script: str, timeout_s: float = 60, check: bool = True):
    """Run ``script`` (sh) as root inside the container of ``init_pid``."""
    return sh(["nsenter", "-t", str(init_pid), "-m", "-u", "-i", "-n", "-p", "--",
               "sh", "-c", script], timeout_s=timeout_s, check=check)


def owner_and_mode(path: str) -> tuple[str, int]:
    st = os.stat(path)
    return pwd.getpwuid(st.st_uid).pw_name, stat.S_IMODE(st.st_mode)


@pytest.fixture
def machine_for_the_package():
    """This machine, checked fit for a package round and held for it alone; the package is
    purged afterwards, whatever happened."""
    assert os.geteuid() == 0, "installing a package needs root"
    for tool in ("dpkg-deb", "apt-get", "runuser", "systemd-analyze", "lintian"):
        assert shutil.which(tool), f"{tool} missing: run tests/setup.sh"
    with open("/run/lock/bookie-package-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_state():
            pytest.fail(f"a bookie package is already installed here ({installed_state()}): "
                        f"this round would replace and purge it")
        try:
            yield
        finally:
            if installed_state():
                sh(["apt-get", *APT[1:], "purge", "bookie"], check=False, env=APT_ENV)


@pytest.mark.package
@pytest.mark.timeout(BUILD_TIMEOUT_S + 600)
def test_the_package_installs_serves_a_client_and_purges_its_data(machine_for_the_package):
    # Build (or take the one given, to rerun the round quickly).
    deb = os.environ.get("BOOKIE_DEB")
    if not deb:
        sh(["bash", os.path.join(REPO, "systemd", "build-deb.sh")], timeout_s=BUILD_TIMEOUT_S)
        debs = sorted(f for f in os.listdir(os.path.join(REPO, "dist")) if f.endswith(".deb"))
        deb = os.path.join(REPO, "dist", debs[-1])
    assert re.fullmatch(r"bookie_[0-9][^_]*_[a-z0-9]+\.deb", os.path.basename(deb))
    info = sh(["dpkg-deb", "--field", deb, "Depends"]).stdout
    assert "python3.11" in info and "adduser" in info
    # The project's one version with the build suffix a later build sorts above.
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        version = re.search(r'^version *= *"([^"]+)"', f.read(), re.M).group(1)
    assert sh(["dpkg-deb", "--field", deb, "Version"]).stdout.strip().startswith(version + "+b")
    # lintian: no error and no warning (the /usr/lib/bookie environment is overridden, with why).
    r = sh(["lintian", "--fail-on", "error,warning", "--suppress-tags", "unused-override",
            deb], check=False, timeout_s=900)
    print(r.stdout + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r"^[EW]: ", r.stdout, re.M), r.stdout

    # Install: the user, the directories, the store, the unit; nothing enabled or started.
    r = sh([*APT, "install", os.path.abspath(deb)], env=APT_ENV)
    assert "metadata formatted" in r.stdout
    assert installed_state() == "ii"
    assert pwd.getpwnam("bookie").pw_shell == "/usr/sbin/nologin"
    for d in (DATA, f"{DATA}/journal", f"{DATA}/ledgers", f"{DATA}/metadata"):
        assert owner_and_mode(d) == ("bookie", 0o700), d
    assert os.path.exists(f"{DATA}/metadata/data.mdb")
    assert os.path.realpath("/usr/bin/bookie") == os.path.realpath("/usr/lib/bookie/bin/bookie")
    conffiles = sh(["dpkg-query", "-W", "-f=${Conffiles}", "bookie"]).stdout
    assert "/etc/bookie/bookie.conf" in conffiles
    with open(CONF_EXAMPLE, encoding="utf-8") as f, open("/etc/bookie/bookie.conf") as g:
        assert f.read() == g.read()
    assert not os.path.exists("/etc/systemd/system/multi-user.target.wants/bookie.service")
    # the package's command, whatever else is on PATH, reports the project's one version
    assert sh(["/usr/bin/bookie", "--version"]).stdout.strip() == f"bookie {version}"
    assert os.path.exists("/usr/share/man/man1/bookie.1.gz")

    # The installed unit passes verify (its ExecStart exists now) and keeps its score.
    r = sh(["systemd-analyze", "verify", "/lib/systemd/system/bookie.service"])
    assert r.stdout + r.stderr == ""
    score = exposure("/lib/systemd/system/bookie.service")
    print(f"exposure level of the installed unit: {score}")
    assert score <= MAX_EXPOSURE

    # No systemd here: run the unit's ExecStart as its user, with its umask.
    with open("/lib/systemd/system/bookie.service", encoding="utf-8") as f:
        exec_start = shlex.split(unit_settings(f.read())["ExecStart"][0])
    conf = BookieConfig.load("/etc/bookie/bookie.conf")
    if not ports_free(conf.bookie_port, conf.bookie_port + 1, conf.metrics_port):
        pytest.fail(f"ports {conf.bookie_port}, {conf.bookie_port + 1} or {conf.metrics_port} are "
                    f"in use here: the installed configuration cannot start")
    log_path = "/tmp/bookie-package-test.log"
    argv = ["runuser", "-u", "bookie", "--", *exec_start]
    if can_emulate_the_file_system_sandbox():
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                FILE_SYSTEM_SANDBOX, "sandbox", *argv]
    with open(log_path, "wb") as log:
        print(f"$ {shlex.join(argv)}")
        runuser = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=lambda: os.umask(0o077))
    try:
        deadline = time.monotonic() + 120
        while b"supervisor: bookie serving" not in open(log_path, "rb").read():
            assert runuser.poll() is None, open(log_path).read()
            assert time.monotonic() < deadline, open(log_path).read()
            time.sleep(0.2)
        print(open(log_path).read().rstrip())
        # the ring is a memfd: nothing of it in /dev/shm (tests/security/test_security_ring.py)
        assert not [f for f in os.listdir("/dev/shm")
                    if f.startswith(f"bookie-{conf.bookie_port}-")]

        r = sh(["runuser", "-u", "bookie", "--", "/usr/lib/bookie/bin/python", "-c", SMOKE],
               timeout_s=120)
        assert "wrote and read back 10 entries" in r.stdout
        assert sh(["runuser", "-u", "bookie", "--", "bookie", "shell", "listbookies",
                   "--metadata", conf.metadata_uri]).stdout.split()[:2] == [
            conf.bookie_id, f"address={conf.bookie_address}"]  # then its location
        # appliance.md's "Check": the health check names a metric that exists, and the
        # storage tools read beside the running bookie.
        if conf.metrics_port:
            with urllib.request.urlopen(f"http://127.0.0.1:{conf.metrics_port}/metrics",
                                        timeout=30) as r:
                up = [line for line in r.read().decode().splitlines()
                      if line.startswith("bookie_worker_up")]
            assert up and all(line.endswith(" 1.0") for line in up), up
        assert "OK:" in sh(["runuser", "-u", "bookie", "--", "bookie", "shell",
                            "localconsistencycheck", "--conf", "/etc/bookie/bookie.conf"]).stdout
    finally:
        # SIGTERM to the supervisor (runuser's child), as systemd's KillMode=mixed does.
        supervisor = bookie_supervisor(runuser.pid)
        if supervisor is not None:
            os.kill(supervisor, signal.SIGTERM)
        try:
            status = runuser.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(runuser.pid, signal.SIGKILL)
            raise
    assert status == 0, open(log_path).read()
    assert "bookie stopped" in open(log_path).read()

    # appliance.md's rebuild-index, run as root by mistake: it becomes the bookie user, and
    # nothing under /var/lib/bookie is root's afterwards.
    sh(["/usr/bin/bookie", "shell", "rebuild-index", "--conf", "/etc/bookie/bookie.conf"])
    root_owned = [os.path.join(parent, name) for parent, dirs, files in os.walk(DATA)
                  for name in dirs + files if os.lstat(os.path.join(parent, name)).st_uid == 0]
    assert root_owned == [], root_owned

    under_systemd_in_a_container(conf)

    # Reinstall (the upgrade path): the data, the store and the instance stay.
    instance = sh(["runuser", "-u", "bookie", "--", "bookie", "shell", "listledgers",
                   "--metadata", conf.metadata_uri]).stdout.split()
    r = sh([*APT, "install", "--reinstall", os.path.abspath(deb)], env=APT_ENV)
    assert "metadata formatted" not in r.stdout
    assert sh(["runuser", "-u", "bookie", "--", "bookie", "shell", "listledgers", "--metadata",
               conf.metadata_uri]).stdout.split() == instance and "0" in instance

    # Remove while a bookie started by hand runs (no systemd): prerm stops it through its
    # directory lock before the program goes, cleanly.
    with open(log_path, "wb") as log:
        by_hand = subprocess.Popen(["runuser", "-u", "bookie", "--", *exec_start], stdout=log,
                                   stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=lambda: os.umask(0o077))
    deadline = time.monotonic() + 120
    while b"supervisor: bookie serving" not in open(log_path, "rb").read():
        assert by_hand.poll() is None and time.monotonic() < deadline, open(log_path).read()
        time.sleep(0.2)
    r = sh([*APT, "remove", "bookie"], env=APT_ENV)
    assert "stopping the bookie" in r.stdout + r.stderr
    assert by_hand.wait(60) == 0 and "bookie stopped" in open(log_path).read()
    # Remove: the program goes, the data and the configuration stay.
    assert installed_state() == "rc"
    assert not os.path.exists("/usr/lib/bookie") and not os.path.lexists("/usr/bin/bookie")
    assert os.path.exists(f"{DATA}/metadata/data.mdb")
    assert os.listdir(f"{DATA}/journal/current") and os.path.exists("/etc/bookie/bookie.conf")

    # Purge: the data and the configuration go too, and dpkg finds nothing to warn about (a
    # directory it could not remove: one the package left files in, or /opt, once the package's
    # home, which a host's own software shares).
    r = sh([*APT, "purge", "bookie"], env=APT_ENV)
    assert [line for line in (r.stdout + r.stderr).splitlines() if "warning" in line.lower()] == []
    assert installed_state() == ""
    assert not os.path.exists(DATA) and not os.path.exists("/etc/bookie")


def under_systemd_in_a_container(conf: BookieConfig) -> None:
    """The installed unit under a real systemd: it serves a client, a SIGKILL of its main
    process is restarted, ``systemctl stop`` stops it cleanly and removes its ring."""
    if shutil.which("systemd-nspawn") is None or shutil.which("nsenter") is None:
        print("(no systemd-nspawn: apt-get install systemd-container to run the unit under "
              "systemd too)")
        return
    root = tempfile.mkdtemp(prefix="bookie-nspawn-")
    log_path = os.path.join(root + ".log")
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", CONTAINER,
            "container", root, f"bookie-test-{os.getpid()}"]
    print(f"$ {shlex.join(argv)}")
    with open(log_path, "wb") as log:
        nspawn = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        init = None
        while init is None:
            assert nspawn.poll() is None, open(log_path).read()
            assert time.monotonic() < deadline, "the container's systemd did not start"
            init = container_init(nspawn.pid)
            time.sleep(0.5)
        while True:
            r = in_container(init, "journalctl -u bookie --no-pager -q", check=False)
            if "bookie serving" in r.stdout:
                break
            assert time.monotonic() < deadline, (f"bookie.service did not serve under systemd:"
                                                 f"\n{r.stdout[-3000:]}")
            time.sleep(2)
        # Clients of the embedded store read the boot id from /proc as the bookie does; nspawn
        # shows the container a boot id of its own, the unit's fresh /proc the kernel's: the
        # client joins the service's mount namespace to see what the service sees.
        smoke = in_container(init, 'cd / && nsenter -t "$(systemctl show -p MainPID --value '
                                   'bookie)" -m -- runuser -u bookie -- /usr/lib/bookie/bin/python '
                                   f'-c {shlex.quote(SMOKE)}', timeout_s=120)
        assert "wrote and read back 10 entries" in smoke.stdout
        state = in_container(init, "systemctl show -p ActiveState -p NRestarts bookie; "
                                   "ls -l /dev/shm").stdout
        assert "ActiveState=active" in state and "NRestarts=0" in state
        assert f"bookie-{conf.bookie_port}-" not in state  # the ring is a memfd, not in /dev/shm
        # A crash is restarted (Restart=on-failure), once serving again.
        in_container(init, "systemctl kill -s SIGKILL bookie")
        while "NRestarts=1" not in in_container(init, "systemctl show -p NRestarts bookie",
                                                  check=False).stdout:
            assert time.monotonic() < deadline + 60, "a killed bookie was not restarted"
            time.sleep(2)
        while in_container(init, "journalctl -u bookie --no-pager -q | grep -c 'bookie "
                                 "serving'", check=False).stdout.strip() != "2":
            assert time.monotonic() < deadline + 120, "the restarted bookie did not serve"
            time.sleep(2)
        # A clean stop: SIGTERM, status 0, the ring removed.
        stopped = in_container(init, "systemctl stop bookie; systemctl show -p Result "
                                     "-p ActiveState bookie; ls /dev/shm", timeout_s=120).stdout
        assert "Result=success" in stopped and "ActiveState=inactive" in stopped
        assert "bookie-" not in stopped.split("ActiveState=inactive", 1)[1]
    finally:
        # nspawn halts the container on the first SIGTERM and stops at once on the second.
        for _ in range(2):
            if nspawn.poll() is None:
                nspawn.send_signal(signal.SIGTERM)
                try:
                    nspawn.wait(30)
                except subprocess.TimeoutExpired:
                    pass
        if nspawn.poll() is None:
            os.killpg(nspawn.pid, signal.SIGKILL)
            nspawn.wait(10)
        os.rmdir(root)
