"""Network faults: bookies, ZooKeeper and clients each in a network namespace of their own.

Topology (all made by ``setup()``, all removed by ``teardown()``; nothing is changed in the
namespace the harness was started from)::

    <p>-hub:  bridge br0 -- one veth per node
    <p>-ctl:  the runner (recovery and checks; never faulted)       127.77.0.1
    <p>-zk:   ZooKeeper                                              127.77.0.2
    <p>-b<i>: bookie i                                               127.77.0.(10 + i)
    <p>-c<k>: writers of slots k, k+3, ... and their tailers (k < 3) 127.77.0.(50 + k)
    <p>-cl:   the log writer and log reader                          127.77.0.60
    <p>-rc:   concurrent recoveries, log takeovers, the deleter      127.77.0.61

The addresses are in 127.0.0.0/8 on purpose: a packet sent to one by mistake from outside the
namespaces stays on that machine's loopback.  Inside each namespace ``route_localnet`` lets them
cross the veth, and the local route for all of 127/8 is narrowed to 127.0.0.1 alone.

Faults, each healed by removing exactly what it added:

- ``partition(shape, way, nodes)``: nftables rules that drop packets between two groups of
  namespaces, both ways or one way (``outbound``: the first group's packets to the second are
  dropped; ``inbound``: the second group's packets to the first).  Shapes: ``isolate_bookie``
  (bookie i | every other node), ``clients_from_bookies`` (writer and log namespaces | the
  bookies listed; recoveries in ``rc`` still reach them), ``bookie_from_zk`` (bookie i |
  ZooKeeper), ``split`` (the bookies listed with c0 and cl | the rest).
- ``lossy(i, percent)``: bookie i drops that share of its packets, in and out.
- ``slow(i, kbit)``: bookie i's outgoing link is rate-limited (an HTB class): queueing delay
  under load.  The kernel this was built on has no netem qdisc, so fixed delay and loss come
  from HTB and nftables' ``numgen`` instead of ``tc netem``.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess

CLONE_NEWNET = 0x40000000
SUBNET = "127.77.0"
CLIENT_GROUPS = 3


class NetworkError(RuntimeError):
    """The namespaces could not be made (not root, a tool missing, no kernel support)."""


def _run(*cmd: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
    return done


def remove_stale_namespaces() -> list[str]:
    """Delete the namespaces of runs whose process is gone (``nem<pid>-*``, left by a run that
    was SIGKILLed before its teardown); returns their names."""
    removed = []
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return removed
    for name in names:
        head = name.split("-", 1)[0]
        if head.startswith("nem") and head[3:].isdigit() and \
                not os.path.exists(f"/proc/{int(head[3:])}"):
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    return removed


class Network:
    """The namespaces of one run (``bookies`` bookies; ZooKeeper's when ``with_zookeeper``)."""

    def __init__(self, bookies: int, with_zookeeper: bool = True, prefix: str | None = None):
        self.n_bookies = bookies
        self.prefix = prefix or f"nem{os.getpid()}"
        self.nodes: dict[str, str] = {"ctl": f"{SUBNET}.1"}  # node -> address
        if with_zookeeper:
            self.nodes["zk"] = f"{SUBNET}.2"
        for i in range(bookies):
            self.nodes[f"b{i}"] = f"{SUBNET}.{10 + i}"
        for k in range(CLIENT_GROUPS):
            self.nodes[f"c{k}"] = f"{SUBNET}.{50 + k}"
        self.nodes["cl"] = f"{SUBNET}.60"
        self.nodes["rc"] = f"{SUBNET}.61"
        self._made: list[str] = []
        self._ids = itertools.count()
        self._own_ns_fd: int | None = None

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    # -- setup -----------------------------------------------------------------------------------
    def setup(self) -> None:
        """Make the hub, one namespace per node, the veths and addresses."""
        if os.geteuid() != 0:
            raise NetworkError("network namespaces need root")
        for tool in ("ip", "nft", "tc"):
            if shutil.which(tool) is None:
                raise NetworkError(f"{tool} not found (tests/setup.sh installs iproute2 and nftables)")
        remove_stale_namespaces()
        hub = self.ns("hub")
        self._add_ns(hub)
        _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", hub, "link", "set", "br0", "up")
        for k, (node, address) in enumerate(self.nodes.items()):
            ns = self.ns(node)
            self._add_ns(ns)
            _run("ip", "-n", hub, "link", "add", f"v{k}", "type", "veth", "peer", "name", "eth0",
                 "netns", ns)
            _run("ip", "-n", hub, "link", "set", f"v{k}", "master", "br0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1",
                 "net.ipv4.conf.eth0.route_localnet=1")
            _run("ip", "-n", ns, "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
            _run("ip", "-n", ns, "route", "replace", "local", "127.0.0.1", "dev", "lo", "table", "local")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")

    def _add_ns(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self._made.append(ns)

    def enter_control(self) -> None:
        """Move this process (call it before starting any thread) into the control namespace;
        every process it starts from then on starts there too."""
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        fd = os.open(f"/run/netns/{self.ns('ctl')}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise NetworkError(f"setns: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(fd)

    def teardown(self) -> None:
        """Delete every namespace this run made (their veths and rules go with them)."""
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()

    # -- where things run --------------------------------------------------------------------------
    def bookie_hosts(self) -> list[str]:
        return [self.nodes[f"b{i}"] for i in range(self.n_bookies)]

    def bookie_prefixes(self) -> list[list[str]]:
        return [["ip", "netns", "exec", self.ns(f"b{i}")] for i in range(self.n_bookies)]

    def zk_host(self) -> str:
        return self.nodes["zk"]

    def zk_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns("zk")]

    def client_node(self, name: str) -> str:
        """The namespace a client process runs in, from its name (see ``workload``)."""
        if "rec" in name or "take" in name or name.endswith("del"):
            return "rc"  # recoveries, takeovers and the deleter
        if "log" in name or name.endswith("quota"):
            return "cl"  # the log's clients, and the quota writer (no slot of its own)
        slot = int(name.split("w", 1)[1].split("g", 1)[0])
        return f"c{slot % CLIENT_GROUPS}"

    def client_prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(self.client_node(name))]

    # -- faults ------------------------------------------------------------------------------------
    def _groups(self, shape: str, nodes: tuple) -> tuple[list[str], list[str]]:
        writers = [f"c{k}" for k in range(CLIENT_GROUPS)] + ["cl"]
        if shape == "isolate_bookie":
            a = [f"b{nodes[0]}"]
            return a, [n for n in self.nodes if n not in a and n != "ctl"]
        if shape == "bookie_from_zk":
            return [f"b{nodes[0]}"], ["zk"] if "zk" in self.nodes else []
        if shape == "clients_from_bookies":
            return writers, [f"b{i}" for i in nodes]
        if shape == "split":
            a = [f"b{i}" for i in nodes] + ["c0", "cl"]
            return a, [n for n in self.nodes if n not in a and n != "ctl"]
        raise ValueError(f"unknown partition shape {shape!r}")

    def partition(self, shape: str, way: str, nodes: tuple):
        """Cut group A from group B (see the module doc); returns the heal."""
        a, b = self._groups(shape, nodes)
        if not a or not b:
            return None
        table = f"nemesis_f{next(self._ids)}"
        a_addrs = ", ".join(self.nodes[n] for n in a)
        b_addrs = ", ".join(self.nodes[n] for n in b)
        touched = []
        # Rules live on A's side for A->B (output) and B->A (input); "both" needs both.
        for node in a:
            rules = []
            if way in ("both", "outbound"):
                rules.append(f"chain cut_out {{ type filter hook output priority 0; "
                             f"ip daddr {{ {b_addrs} }} drop; }}")
            if way in ("both", "inbound"):
                rules.append(f"chain cut_in {{ type filter hook input priority 0; "
                             f"ip saddr {{ {b_addrs} }} drop; }}")
            self._nft(node, table, rules)
            touched.append(node)
        if way == "both":
            for node in b:  # and on B's side, so neither direction slips through
                self._nft(node, table, [f"chain cut_out {{ type filter hook output priority 0; "
                                        f"ip daddr {{ {a_addrs} }} drop; }}"])
                touched.append(node)
        return lambda: self._drop_table(touched, table)

    def lossy(self, i: int, percent: int):
        """Bookie i drops ``percent`` % of what crosses its veth (its own loopback, between
        its workers, is left alone; so is the runner)."""
        table = f"nemesis_f{next(self._ids)}"
        node = f"b{i}"
        ctl = self.nodes["ctl"]
        self._nft(node, table, [
            f"chain cut_out {{ type filter hook output priority 0; oifname \"eth0\" "
            f"ip daddr != {ctl} numgen random mod 100 < {percent} drop; }}",
            f"chain cut_in {{ type filter hook input priority 0; iifname \"eth0\" "
            f"ip saddr != {ctl} numgen random mod 100 < {percent} drop; }}"])
        return lambda: self._drop_table([node], table)

    def slow(self, i: int, kbit: int):
        ns = self.ns(f"b{i}")
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root",
             "handle", "1:", "htb", "default", "1")
        _run("ip", "netns", "exec", ns, "tc", "class", "replace", "dev", "eth0", "parent", "1:",
             "classid", "1:1", "htb", "rate", f"{kbit}kbit", "burst", "4k")
        return lambda: _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0",
                            "root", check=False)

    def heal(self) -> None:
        """Remove every rule and rate limit of every fault."""
        for node in self.nodes:
            ns = self.ns(node)
            _run("ip", "netns", "exec", ns, "nft", "flush", "ruleset", check=False)
            if node.startswith("b"):
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root",
                     check=False)

    def _nft(self, node: str, table: str, chains: list[str]) -> None:
        script = f"table inet {table} {{\n" + "\n".join(chains) + "\n}\n"
        _run("ip", "netns", "exec", self.ns(node), "nft", "-f", "-", stdin=script)

    def _drop_table(self, nodes: list[str], table: str) -> None:
        for node in nodes:
            _run("ip", "netns", "exec", self.ns(node), "nft", "delete", "table", "inet", table,
                 check=False)
