"""Nodes joined by links whose rate you dial, on one Linux machine: the network that the benchmarks
and tests put between ranks when loopback is too fast to show what a network costs.

Each node is a network namespace with one interface, `eth0`, at 10.0.0.(k+1). Every node's `eth0` is
one end of a veth pair whose other end is a port of a bridge, the switch, in a namespace of its own.
With a rate, tc's token bucket filter (`tbf`) limits each port in both directions: what a node sends
leaves through its `eth0`, and what it receives leaves the switch through its port. So every node
has a full-duplex link of that rate to the switch, as a machine has to a top-of-rack switch.

    with Network(nodes=2, rate="100mbit") as net:
        net.node(0).address          # '10.0.0.1'
        net.node(1).run(["python", "x.py"])  # a command inside node 1

What this reproduces, and what it does not:
- bandwidth: yes. tbf counts whole frames, so a TCP stream's payload gets about 95% of the rate
  with 1500-byte frames;
- latency and jitter: no. They need tc's `netem`, which not every kernel has (this project's
  machines lack it);
- a real NIC's offloads, interrupts and the switch's buffers: no. Everything runs on this
  machine's CPUs, which also carry the ranks' compute.

Building one needs root and iproute2. `LinkError` says, in one line, why a network cannot be built
here; tests skip with it. Every namespace, and with it every veth and qdisc, is removed when the
`with` block ends, however it ends; one left by a process that was killed (SIGKILL) is removed by the
next Network built on the machine.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from distdocs.arguments import parse_rate

PREFIX = "distdocs-net"
NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000
# tbf's bucket: rate x 2 ms, and never less than a 64 KiB GSO frame (so 250 KB at 1 Gbit/s, 64 KiB
# at 100 Mbit/s). A bucket much smaller than that
# undershoots the rate at 1 Gbit/s (the qdisc's timer fires late); a much larger one lets the first
# megabytes of a message through at memory speed.
BUCKET_S = 0.002
_created = 0


def burst_bytes(rate: str) -> int:
    """The bytes a link of `rate` lets through at once after a pause: its tbf bucket. A real link
    has no such burst; a model of a message over a dialled link counts it as sent for free."""
    return max(64 * 1024, int(parse_rate(rate) / 8 * BUCKET_S))


class LinkError(RuntimeError):
    """Why a network cannot be built here, in one line."""


_can_build: str | None = None  # "" once a probe succeeded in this process; else why it failed


def check_can_build() -> None:
    """Raise LinkError unless this process can build namespaces, veth pairs and tbf qdiscs. Being root
    is not enough (a container may lack the capabilities, a kernel the qdisc), so the first call
    builds a throwaway namespace with a rate-limited veth pair, and the answer is kept."""
    global _can_build
    if os.geteuid() != 0:
        raise LinkError("dialled links need root (network namespaces and tc); run as root to measure them")
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            raise LinkError(f"dialled links need `{tool}` (iproute2), which is not installed")
    if _can_build is None:
        probe = f"{PREFIX}-{os.getpid()}-probe"
        try:
            _sh("ip", "netns", "add", probe)
            _sh("ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
            _sh("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "probe0", "root", "tbf",
                "rate", "1gbit", "burst", "65536", "latency", "100ms")  # fmt: skip
            _can_build = ""
        except LinkError as err:
            _can_build = f"cannot build dialled links here: {err}"
        finally:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    if _can_build:
        raise LinkError(_can_build)


def _sh(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        raise LinkError(f"`{' '.join(args)}` failed: {lines[-1] if lines else f'exit code {result.returncode}'}")


def enter(namespace: str) -> None:
    """Move the calling thread into `namespace`: its sockets from now on use that namespace's network.
    Call it in a fresh process before any other thread starts, or in a thread of its own."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Node:
    index: int
    namespace: str
    address: str
    interface: str = "eth0"

    def command(self, args: list[str]) -> list[str]:
        """`args` as a command that runs inside this node."""
        return ["ip", "netns", "exec", self.namespace, *args]

    def run(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(args), **kwargs)


class Network:
    """`nodes` namespaces on one switch; with `rate` (tc's spelling: 100mbit, 1gbit), every node's
    link to the switch carries at most that much in each direction. With `inside`, the link inside
    each node is dialled too: its loopback, which carries the traffic between ranks of one node.
    Use it as a context manager."""

    def __init__(self, nodes: int, rate: str | None = None, inside: str | None = None) -> None:
        global _created
        if nodes < 1 or nodes > 250:
            raise ValueError(f"nodes: {nodes}, expected 1 to 250")
        self.rate = rate
        self.rate_bits = parse_rate(rate) if rate else None
        self.inside = inside
        if inside:
            parse_rate(inside)
        _created += 1
        self.name = f"{PREFIX}-{os.getpid()}-{_created}"
        self.switch = f"{self.name}-sw"
        self.nodes = [Node(k, f"{self.name}-{k}", f"10.0.0.{k + 1}") for k in range(nodes)]
        self._built = False

    def node(self, k: int) -> Node:
        return self.nodes[k]

    def namespaces(self) -> list[str]:
        return [self.switch] + [n.namespace for n in self.nodes]

    def build(self) -> Network:
        check_can_build()
        remove_orphans()
        self._built = True
        try:
            _sh("ip", "netns", "add", self.switch)
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for n in self.nodes:
                port = f"p{n.index}"
                _sh("ip", "netns", "add", n.namespace)
                _sh(
                    "ip",
                    "link",
                    "add",
                    port,
                    "netns",
                    self.switch,
                    "type",
                    "veth",
                    "peer",
                    "eth0",
                    "netns",
                    n.namespace,
                )
                _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0", "up")
                _sh("ip", "-n", n.namespace, "addr", "add", f"{n.address}/24", "dev", "eth0")
                _sh("ip", "-n", n.namespace, "link", "set", "eth0", "up")
                _sh("ip", "-n", n.namespace, "link", "set", "lo", "up")
                if self.rate_bits:
                    for ns, dev in ((n.namespace, "eth0"), (self.switch, port)):
                        self._limit(ns, dev)
                if self.inside:
                    self._limit(n.namespace, "lo", rate=self.inside)
        except BaseException:
            self.close()
            raise
        return self

    def set_rate(self, rate: str) -> None:
        """Dial every link of a built network to `rate`, in place: the ranks on it keep their
        connections, so that one world can be measured at several rates."""
        parse_rate(rate)
        if not self._built:
            raise LinkError("set_rate: the network is not built")
        self.rate, self.rate_bits = rate, parse_rate(rate)
        for n in self.nodes:
            for ns, dev in ((n.namespace, "eth0"), (self.switch, f"p{n.index}")):
                self._limit(ns, dev, "replace")

    def _limit(self, namespace: str, dev: str, how: str = "add", rate: str | None = None) -> None:
        rate = rate or self.rate
        bucket = burst_bytes(rate)
        try:
            _sh("ip", "netns", "exec", namespace, "tc", "qdisc", how, "dev", dev, "root", "tbf",
                "rate", rate, "burst", str(bucket), "latency", "100ms")  # fmt: skip
        except LinkError as err:
            raise LinkError(f"tc could not limit a link's rate with tbf: {err}") from None

    def close(self) -> None:
        """Remove every namespace of this network, and so its veths and qdiscs. Processes still inside
        a node are killed first: a namespace lives on while a process holds it."""
        if not self._built:
            return
        self._built = False
        for ns in self.namespaces():
            _kill_inside(ns)
            _delete(ns)

    def __enter__(self) -> Network:
        return self.build()

    def __exit__(self, *exc) -> None:
        self.close()


def _kill_inside(namespace: str) -> None:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass


def _delete(namespace: str) -> None:
    result = subprocess.run(["ip", "netns", "del", namespace], capture_output=True, text=True, timeout=30)
    if result.returncode != 0 and (NETNS_DIR / namespace).exists():
        print(f"distdocs.lab.links: could not remove namespace {namespace}: {result.stderr.strip()}", file=sys.stderr)


def leftover_namespaces(pid: int | None = None) -> list[str]:
    """The namespaces of networks still on this machine; only those built by `pid`, if given."""
    try:
        names = [p.name for p in NETNS_DIR.iterdir()]
    except FileNotFoundError:
        return []
    mine = f"{PREFIX}-{pid}-" if pid is not None else f"{PREFIX}-"
    return sorted(n for n in names if n.startswith(mine))


def remove_orphans() -> list[str]:
    """Remove the namespaces of networks whose building process has died (killed before it could
    clean up); return their names."""
    removed = []
    for ns in leftover_namespaces():
        pid = int(ns[len(PREFIX) + 1 :].split("-")[0])
        try:
            os.kill(pid, 0)
            continue  # alive: its network is in use
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _kill_inside(ns)
        _delete(ns)
        removed.append(ns)
    return removed


def measure_rate(net: Network, src: int, dst: int, nbytes: int = 16 << 20, port: int = 5201) -> float:
    """Send `nbytes` over one TCP connection from node `src` to node `dst`; return the payload's bits
    per second, timed at the receiver from its first byte to its last. Runs in two threads of this
    process, each moved into its node's namespace."""
    ready, result, errors = threading.Event(), {}, []

    def receive() -> None:
        try:
            enter(net.node(dst).namespace)
            with socket.create_server((net.node(dst).address, port)) as server:
                ready.set()
                server.settimeout(60)
                conn, _ = server.accept()
                start = time.perf_counter()
                with conn:
                    buf, got = bytearray(1 << 20), 0
                    while k := conn.recv_into(buf):
                        got += k
                if got != nbytes:
                    raise ConnectionError(f"received {got} of {nbytes} bytes")
                result["bits_per_s"] = got * 8 / (time.perf_counter() - start)
        except BaseException as err:
            errors.append(err)
            ready.set()

    def send() -> None:
        try:
            enter(net.node(src).namespace)
            chunk = memoryview(b"\0" * (1 << 20))
            with socket.create_connection((net.node(dst).address, port), timeout=60) as conn:
                for offset in range(0, nbytes, len(chunk)):
                    conn.sendall(chunk[: min(len(chunk), nbytes - offset)])
        except BaseException as err:
            errors.append(err)

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    ready.wait(30)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(120)
    receiver.join(120)
    if errors:
        raise errors[0]
    if "bits_per_s" not in result:
        raise TimeoutError(f"no result from a {nbytes}-byte transfer between nodes {src} and {dst} within 120 s")
    return result["bits_per_s"]
