"""The drill's network: one Linux network namespace per host, each joined to one bridge
by a veth pair, addresses in 198.18.<instance>.0/24 (part of 198.18.0.0/15, the range
reserved for network benchmarks), no default route in any namespace (nothing reaches out),
and a ``tc netem`` delay on both ends of every veth when the kernel has the qdisc (where it
has not, ``self.netem`` says why and the stack puts a delay relay in front of every server
instead: devtools/drill/relay.py, Stack.start_relays).

Every name starts with the instance's prefix (``sdk<instance>``, instance 0 to 9, so that a
CI run and a manual one can run side by side): ``cleanup()`` removes whatever a crashed run
of the same instance left (its processes, namespaces and links) before a new run builds
anything, and at exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

DEAD_MAC = "02:00:5e:de:ad:00"  # a locally administered address no interface of the drill has


def prefix(instance: int) -> str:
    if not 0 <= instance <= 9:
        raise ValueError("the drill's instance is a digit, 0-9")
    return f"sdk{instance}"  # namespaces sdk<i>-<host>, links sdk<i>b (bridge), sdk<i>v<n> (veths)


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def ns_exec(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("ip", "netns", "exec", ns, *argv, check=check)


def available() -> str | None:
    """Why namespaces cannot be built here (None: they can)."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
    try:
        probe = run("ip", "netns", "list", check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is missing"
    if probe.returncode != 0:
        return f"ip netns is unavailable: {probe.stderr.strip()}"
    return None


def namespaces(instance: int) -> list[str]:
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{prefix(instance)}-")]


def links(instance: int) -> list[str]:
    out = run("ip", "-o", "link", "show", check=False).stdout
    names = []
    for line in out.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(prefix(instance)):
            names.append(name)
    return names


def cleanup(instance: int) -> list[str]:
    """Kill every process left in one of the instance's namespaces, delete the namespaces
    and the links. Returns what it removed (empty on a clean machine)."""
    removed = []
    for ns in namespaces(instance):
        pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        run("ip", "netns", "del", ns, check=False)
        removed.append(ns)
    for link in links(instance):
        run("ip", "link", "del", link, check=False)
        removed.append(link)
    return removed


@dataclass
class Host:
    name: str
    address: str
    ns: str
    veth: str  # the bridge's end; the namespace's end is eth0


class Network:
    def __init__(self, hosts: dict[str, int], latency_ms: float, instance: int = 0):
        """``hosts``: name -> last octet of its address."""
        self.instance, p = instance, prefix(instance)
        self.subnet = f"198.18.{instance}"
        self.bridge, self.control_address = f"{p}b", f"198.18.{instance}.1"  # this process: the operator's machine
        self.hosts = {
            name: Host(name, f"{self.subnet}.{octet}", f"{p}-{name}", f"{p}v{i}")
            for i, (name, octet) in enumerate(hosts.items())
        }
        self.latency_ms = latency_ms
        self.netem: str | None = None  # why there is no netem delay (None: applied)
        self.cuts: list[tuple[str, str]] = []

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def build(self) -> Network:
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.control_address}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for host in self.hosts.values():
            run("ip", "netns", "add", host.ns)
            run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", f"{host.veth}p")
            run("ip", "link", "set", f"{host.veth}p", "netns", host.ns)
            ns_exec(host.ns, "ip", "link", "set", f"{host.veth}p", "name", "eth0")
            ns_exec(host.ns, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
            ns_exec(host.ns, "ip", "link", "set", "eth0", "up")
            ns_exec(host.ns, "ip", "link", "set", "lo", "up")
            run("ip", "link", "set", host.veth, "master", self.bridge, "up")
        self.set_latency(self.latency_ms)
        return self

    def set_latency(self, ms: float) -> None:
        """A netem delay of ``ms`` on both ends of every veth: each way between two hosts
        crosses two of them, so each end gets half (``ms`` each way in all)."""
        self.latency_ms = ms
        half = f"{ms / 2:.4f}ms"
        for host in self.hosts.values():
            for argv in (
                ("tc", "qdisc", "replace", "dev", host.veth, "root", "netem", "delay", half),
                (
                    "ip",
                    "netns",
                    "exec",
                    host.ns,
                    "tc",
                    "qdisc",
                    "replace",
                    "dev",
                    "eth0",
                    "root",
                    "netem",
                    "delay",
                    half,
                ),
            ):
                done = run(*argv, check=False)
                if done.returncode != 0:
                    self.netem = f"tc netem refused ({done.stderr.strip()}): the kernel has no sch_netem"
                    return
        self.netem = None

    def cut(self, source: str, targets: list[str]) -> None:
        """``source`` loses ``targets`` (one way, as a partition looks from the source's
        side): the source's namespace gets a permanent neighbour entry for each target
        with a hardware address no port has, so its frames to them vanish on the bridge
        (silently dropped, as a failed switch port or a firewall's DROP: connecting and
        sending time out) while the targets and every other host keep each other."""
        for target in targets:
            ns_exec(self[source].ns, "ip", "neigh", "replace", self[target].address, "lladdr", DEAD_MAC,
                    "dev", "eth0", "nud", "permanent")  # fmt: skip
            self.cuts.append((source, target))

    def heal(self) -> None:
        for source, target in self.cuts:
            ns_exec(self[source].ns, "ip", "neigh", "del", self[target].address, "dev", "eth0", check=False)
        self.cuts = []

    def can_reach_outside(self, name: str) -> bool:
        """Whether the host has any route beyond the drill's subnet."""
        routes = ns_exec(self[name].ns, "ip", "route", "get", "1.1.1.1", check=False)
        return routes.returncode == 0
