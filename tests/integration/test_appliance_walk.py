"""docs/appliance.md walked top to bottom on a freshly built and installed package (opt-in:
``-m package``, root, Debian; ``BOOKIE_DEB=path`` skips the build).

Every ``sh`` block of the page runs in the page's order, as one bash script, exactly as the page
writes it; after each, the test checks what the page says it did.  Where this machine cannot do
literally what the page says, a stand-in does the same thing, declared in ``PRELUDE`` below:

- ``sudo`` is the root this runs as (``sudo -u bookie`` is ``runuser -u bookie --``);
- the page's disks (``/dev/nvme1n1``, ``/dev/sdb``, ``/dev/sdc``) are loop devices over files,
  and its commented ``/etc/fstab`` lines go to a private fstab that ``mount -a`` reads;
- a ``# bookie.conf: KEY=VALUE`` comment is applied to ``/etc/bookie/bookie.conf``;
- with no systemd running, ``systemctl enable --now|stop|restart bookie`` runs or stops the
  unit's ``ExecStart`` as the unit's user with its umask, ``systemctl status bookie`` lists the
  bookie's processes by their titles, ``journalctl -u bookie`` reads that bookie's log;
- the upgrade's ``<new version>`` is this build repacked with a higher build suffix;
- the operator answers apt's "Do you want to continue?" with y (on standard input).

The page's prose commands (the storage tools beside a running bookie, ``rebuild-index`` while it
is stopped) and the read-only verbs of its BookKeeper table run too.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile

import pytest

from test_deb_package import (APT, APT_ENV, BUILD_TIMEOUT_S, DATA, REPO,  # noqa: F401
                              installed_state, machine_for_the_package, sh)

PAGE = os.path.join(REPO, "docs", "appliance.md")
DISKS = ("/dev/nvme1n1", "/dev/sdb", "/dev/sdc")
DISK_MB = 256

PRELUDE = r"""
set -euo pipefail
sudo() {
  if [ "$1" = -u ]; then local u=$2; shift 2; runuser -u "$u" -- "$@"; else "$@"; fi
}
disk() {  # the loop device standing in for one of the page's disks
  case $1 in
    /dev/nvme1n1) echo "$WALK_LOOP_0" ;; /dev/sdb) echo "$WALK_LOOP_1" ;;
    /dev/sdc) echo "$WALK_LOOP_2" ;; *) echo "$1" ;;
  esac
}
mkfs.ext4() { command mkfs.ext4 -q -F "$(disk "$1")"; }
mount() { if [ "$*" = "-a" ]; then command mount -a -T "$WALK/fstab"; else command mount "$@"; fi; }
if [ ! -d /run/systemd/system ]; then
  systemctl() {
    local verb=$1; shift
    case "$verb $*" in
      "enable --now bookie"|"start bookie"|"restart bookie")
        [ "$verb" = restart ] && walk_stop
        walk_start ;;
      "stop bookie") walk_stop ;;
      "status bookie")
        local pid; pid=$(cat "$WALK/bookie.pid" 2>/dev/null || true)
        [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || { echo "bookie: inactive (dead)"; return 3; }
        echo "bookie: active (running)"; ps -eo pid,args | grep -F 'bookie[' | grep -v grep ;;
      *) echo "systemctl stand-in: '$verb $*' has no stand-in" >&2; return 2 ;;
    esac
  }
  journalctl() {
    [ "$1 $2" = "-u bookie" ] || { echo "journalctl stand-in: only -u bookie" >&2; return 2; }
    shift 2; if [ "${1:-}" = -n ]; then tail -n "$2" "$WALK/bookie.log"; else cat "$WALK/bookie.log"; fi
  }
  walk_start() {  # the unit's ExecStart, as its User, with its UMask
    (umask 0077; setsid runuser -u bookie -- $WALK_EXEC_START >>"$WALK/bookie.log" 2>&1 </dev/null &
     echo $! >"$WALK/runuser.pid")
    local i
    for i in $(seq 1200); do
      if [ "$(grep -c 'supervisor: bookie serving' "$WALK/bookie.log")" -gt "$(cat "$WALK/served")" ]; then
        grep -c 'supervisor: bookie serving' "$WALK/bookie.log" >"$WALK/served"
        pgrep -f -n '^/usr/lib/bookie/bin/python3?[.0-9]* /usr/lib/bookie/bin/bookie run' >"$WALK/bookie.pid"
        return 0
      fi
      kill -0 "$(cat "$WALK/runuser.pid")" 2>/dev/null || { tail -5 "$WALK/bookie.log" >&2; return 1; }
      sleep 0.1
    done
    echo "walk: the bookie did not serve within 120 s" >&2; return 1
  }
  walk_stop() {
    local pid; pid=$(cat "$WALK/bookie.pid" 2>/dev/null || true)
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    local i; for i in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$WALK/bookie.pid"
  }
fi
"""


# Every ledger the walk wrote (the page's check writes one, password b"check"), read back.
READ_BACK = """sudo -u bookie /usr/lib/bookie/bin/python - <<'EOF'
from bookie.client import BookKeeper
with BookKeeper("lmdb:///var/lib/bookie/metadata") as bk:
    for ledger_id in sorted(bk.list_ledgers()):
        rh = bk.open_ledger(ledger_id, password=b"check")
        print([e.data for e in rh.read_entries(0, rh.last_add_confirmed)])
EOF
"""


def page_blocks() -> list[tuple[str, str]]:
    """(section heading, text) of every ``sh`` block of the page, in the page's order."""
    section, blocks, block = "", [], None
    with open(PAGE, encoding="utf-8") as f:
        for line in f:
            if block is None and line.startswith("## "):
                section = line[3:].strip()
            elif block is None and line.rstrip() == "```sh":
                block = []
            elif block is not None and line.rstrip() == "```":
                blocks.append((section, "".join(block)))
                block = None
            elif block is not None:
                block.append(line)
    return blocks


class Walk:
    """The walk's state: a directory with the stand-ins' files, the loop devices, the log."""

    def __init__(self, root: str, deb: str):
        self.root, self.deb = root, deb
        self.loops: list[str] = []
        self.env = dict(APT_ENV, WALK=root)
        with open(os.path.join(root, "served"), "w") as f:
            f.write("0")
        open(os.path.join(root, "bookie.log"), "w").close()

    def run(self, section: str, text: str, timeout_s: float = 600) -> str:
        """One block of the page, with the stand-ins; its output (the transcript) returned."""
        print(f"\n### {section}\n{text.rstrip()}")
        env = dict(self.env)
        if os.path.exists("/lib/systemd/system/bookie.service"):  # installed
            with open("/lib/systemd/system/bookie.service", encoding="utf-8") as f:
                env["WALK_EXEC_START"] = next(line.split("=", 1)[1].strip() for line in f
                                              if line.startswith("ExecStart="))
        for i, loop in enumerate(self.loops):
            env[f"WALK_LOOP_{i}"] = loop
        r = subprocess.run(["bash", "-c", PRELUDE + text], cwd=self.root, env=env, input="y\n",
                           capture_output=True, text=True, timeout=timeout_s)
        print((r.stdout + r.stderr).rstrip())
        assert r.returncode == 0, (f"the page's '{section}' block failed (status {r.returncode}):"
                                   f"\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        return r.stdout

    def make_disks(self, block: str) -> None:
        """Loop devices for the page's disks, and the private fstab of its commented lines."""
        for i, _ in enumerate(DISKS):
            image = os.path.join(self.root, f"disk{i}.img")
            with open(image, "wb") as f:
                f.truncate(DISK_MB << 20)
            self.loops.append(sh(["losetup", "--find", "--show", image]).stdout.strip())
        lines = [line.lstrip("#").strip() for line in block.splitlines()
                 if re.match(r"#\s+/dev/\S+\s+/", line)]
        assert [line.split()[0] for line in lines] == list(DISKS), lines
        with open(os.path.join(self.root, "fstab"), "w") as f:
            for line in lines:
                dev, rest = line.split(None, 1)
                f.write(f"{self.loops[DISKS.index(dev)]} {rest}\n")

    def apply_conf_comments(self, block: str) -> None:
        for key, value in re.findall(r"#\s*bookie\.conf:\s*(\w+)=(\S+)", block):
            with open("/etc/bookie/bookie.conf", "a", encoding="utf-8") as f:
                f.write(f"\n# set by docs/appliance.md's walk\n{key}={value}\n")

    def close(self) -> None:
        if os.path.exists("/lib/systemd/system/bookie.service"):
            subprocess.run(["bash", "-c", PRELUDE + "systemctl stop bookie"], cwd=self.root,
                           env=self.env, capture_output=True, timeout=120)
        for mount_point in ("journal", "ledgers", "index"):
            subprocess.run(["umount", f"{DATA}/{mount_point}"], capture_output=True)
        for loop in self.loops:
            subprocess.run(["losetup", "-d", loop], capture_output=True)


def newer_build(deb: str, root: str) -> tuple[str, str]:
    """The same package under a version that sorts above it (the page's upgrade)."""
    old = sh(["dpkg-deb", "--field", deb, "Version"]).stdout.strip()
    new = re.sub(r"\+b(\d+)$", lambda m: f"+b{int(m.group(1)) + 1}", old)
    assert new != old, old
    tree = os.path.join(root, "repack")
    sh(["dpkg-deb", "-R", deb, tree])
    control = os.path.join(tree, "DEBIAN", "control")
    with open(control, encoding="utf-8") as f:
        text = f.read()
    with open(control, "w", encoding="utf-8") as f:
        f.write(text.replace(f"Version: {old}\n", f"Version: {new}\n"))
    arch = sh(["dpkg-deb", "--field", deb, "Architecture"]).stdout.strip()
    out = os.path.join(root, "dist", f"bookie_{new}_{arch}.deb")
    sh(["dpkg-deb", "--root-owner-group", "-Zxz", "-b", tree, out], timeout_s=600)
    shutil.rmtree(tree)
    return new, out


@pytest.mark.package
@pytest.mark.timeout(BUILD_TIMEOUT_S + 1200)
def test_the_appliance_page_walked_top_to_bottom(machine_for_the_package):
    blocks = page_blocks()
    sections = [s for s, _ in blocks]
    assert sections == ["Build the package", "Install", "Configure: one disk per directory",
                        "Start", "Check", "Check", "Upgrade", "Uninstall"], sections
    root = tempfile.mkdtemp(prefix="bookie-walk-")
    os.makedirs(os.path.join(root, "dist"))
    deb = os.environ.get("BOOKIE_DEB")
    by_section = dict(enumerate(blocks))
    # Build: the page's command, in the checkout.
    if deb:
        print(f"(BOOKIE_DEB={deb}: the page's build step is skipped)")
    else:
        r = subprocess.run(["bash", "-c", by_section[0][1]], cwd=REPO, capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT_S)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        debs = sorted(f for f in os.listdir(os.path.join(REPO, "dist")) if f.endswith(".deb"))
        deb = os.path.join(REPO, "dist", debs[-1])
    walk = Walk(root, os.path.abspath(deb))
    try:
        # Install: the page's example file name is this build.
        install = by_section[1][1]
        example = re.search(r"\./dist/(bookie_\S+\.deb)", install).group(1)
        os.symlink(walk.deb, os.path.join(root, "dist", example))
        out = walk.run("Install", install)
        assert installed_state() == "ii" and "metadata formatted" in out
        assert pwd.getpwnam("bookie").pw_shell == "/usr/sbin/nologin"
        table = open(PAGE, encoding="utf-8").read()
        for d in ("journal", "ledgers"):
            st = os.stat(f"{DATA}/{d}")
            mode = oct(st.st_mode & 0o777)[2:].rjust(4, "0")
            assert pwd.getpwuid(st.st_uid).pw_name == "bookie", d
            assert f"owned by `bookie:bookie`, mode {mode}" in table, (d, mode)

        # Configure: three disks mounted on the bookie's directories, the index on its own.
        configure = by_section[2][1]
        walk.make_disks(configure)
        walk.run("Configure", configure)
        walk.apply_conf_comments(configure)
        mounts = open("/proc/mounts").read()
        for i, d in enumerate(("journal", "ledgers", "index")):
            assert f"{walk.loops[i]} {DATA}/{d} ext4" in mounts, (d, mounts)
            assert pwd.getpwuid(os.stat(f"{DATA}/{d}").st_uid).pw_name == "bookie"

        # Start, then Check: the page's commands and what it says they print.
        walk.run("Start", by_section[3][1])
        check = walk.run("Check", by_section[4][1])
        assert "active (running)" in check and "bookie serving" in check
        for worker in ("journal", "add", "read", "gc"):
            assert re.search(rf"bookie\[\d+\] {worker}\b", check), (worker, check)
        worker_up = [line for line in check.splitlines() if line.startswith("bookie_worker_up")]
        assert worker_up and all(line.endswith(" 1.0") for line in worker_up), worker_up
        bookie_id = next(line.split()[0] for line in check.splitlines() if re.fullmatch(
            r"[\w.-]+:\d+( .*)?", line.strip()))
        written = walk.run("Check", by_section[5][1])
        assert written.strip() == "[b'hello']", written
        # The files land on the disks the page mounted: the index on its own disk.
        assert os.listdir(f"{DATA}/index/current"), "nothing on the index disk"
        # The prose: storage tools beside the running bookie; the table's read-only verbs.
        meta = "--metadata lmdb:///var/lib/bookie/metadata"
        out = walk.run("Check (prose)", "sudo -u bookie bookie shell localconsistencycheck "
                                        "--conf /etc/bookie/bookie.conf")
        assert "OK:" in out
        verbs = walk.run("BookKeeper's shell", "\n".join(
            f"sudo -u bookie bookie shell {v} {meta}" for v in
            ("listbookies -a", "listbookies -rw", "listledgers -m", "whatisinstanceid",
             "cookie_list", f"cookie_get {bookie_id}", f"endpointinfo -b {bookie_id}",
             "lostbookierecoverydelay -get")))
        assert bookie_id in verbs
        # A lost index, rebuilt with the page's command while the bookie is stopped.
        walk.run("Check (prose)", "systemctl stop bookie\n"
                                  "rm -rf /var/lib/bookie/index/current/index\n"
                                  "sudo -u bookie bookie shell rebuild-index --conf "
                                  "/etc/bookie/bookie.conf\n"
                                  "systemctl start bookie")
        assert walk.run("(walk: read back)", READ_BACK).strip() == "[b'hello']"

        # Upgrade: a newer build over the running bookie; data, store and cookies stay.
        new_version, _ = newer_build(walk.deb, root)
        upgrade = by_section[6][1].replace("<new version>", new_version)
        ledgers_before = walk.run("(walk)", f"sudo -u bookie bookie shell listledgers {meta}")
        out = walk.run("Upgrade", upgrade)
        assert sh(["dpkg-query", "-W", "-f=${Version}", "bookie"]).stdout == new_version
        assert "stopping the bookie" in out, out
        walk.run("(walk: postinst starts an enabled unit; no systemd here)",
                 "systemctl start bookie")
        assert walk.run("(walk)", f"sudo -u bookie bookie shell listledgers {meta}") == \
            ledgers_before
        assert walk.run("(walk: read back)", READ_BACK).strip() == "[b'hello']"

        # Uninstall: remove with the bookie running, then purge.
        uninstall = by_section[7][1]
        remove, purge = uninstall.split("\nsudo apt-get purge", 1)
        out = walk.run("Uninstall (remove)", remove)
        assert "stopping the bookie" in out and installed_state() == "rc"
        assert not os.path.exists("/usr/lib/bookie")
        assert os.path.exists(f"{DATA}/metadata/data.mdb")
        out = walk.run("Uninstall (purge)", "sudo apt-get purge" + purge)
        assert installed_state() == ""
        # The page: purge empties a disk mounted under /var/lib/bookie, does not unmount it.
        mounts = open("/proc/mounts").read()
        for i, d in enumerate(("journal", "ledgers", "index")):
            assert f"{walk.loops[i]} {DATA}/{d} ext4" in mounts, (d, mounts)
            assert set(os.listdir(f"{DATA}/{d}")) <= {"lost+found"}, os.listdir(f"{DATA}/{d}")
        assert not os.path.exists("/etc/bookie")
    finally:
        walk.close()
        shutil.rmtree(root, ignore_errors=True)
        if not installed_state() and os.path.isdir(DATA) and not os.path.ismount(
                f"{DATA}/journal"):
            shutil.rmtree(DATA, ignore_errors=True)
