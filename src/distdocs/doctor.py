"""`distdocs doctor`: what this machine offers for distributed training, whether the examples can
run on it, and the traps it sets for them (too many threads or processes, a busy port, a
`localhost` that does not work, launchers left running)."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path

from distdocs import __version__
from distdocs.processes import command_line, listening_sockets, pids, process_stat, socket_inodes


def environment_report() -> dict:
    """Versions, devices and backends."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    return {
        "distdocs": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "cuda_available": cuda,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "distributed_available": dist.is_available(),
        "backends": {
            "gloo": dist.is_gloo_available(),
            "nccl": dist.is_nccl_available(),
            "mpi": dist.is_mpi_available(),
        },
        "examples_use": "nccl on cuda:LOCAL_RANK" if cuda else "gloo on the CPU",
    }


def format_report(report: dict) -> str:
    width = max(len(k) for k in report)
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in value.items())
        lines.append(f"{key:<{width}}  {value}")
    return "\n".join(lines)


def problem(report: dict) -> str | None:
    """Why the examples cannot run here, or None."""
    if not (report["distributed_available"] and report["backends"]["gloo"]):
        return "this torch build has no torch.distributed with gloo; the examples need it"
    return None


# The traps that stop or slow distributed runs on one machine, each found from what the machine
# shows, and each with the fix. A trap is an error when the launch asked about (nproc_per_node
# processes here) cannot work until it is fixed, and a warning when it works but badly, or only
# some of its runs fail.
DEFAULT_PORT = 29500  # torchrun's --master-port, and the usual --rdzv-endpoint port


@dataclass
class Trap:
    level: str  # "error" or "warning"
    message: str
    fix: str


def find_traps(nproc_per_node: int, port: int = DEFAULT_PORT, report: dict | None = None) -> list[Trap]:
    """Every trap this machine sets for `nproc_per_node` processes launched here."""
    report = report or environment_report()
    traps = []
    if problem(report):
        traps.append(Trap("error", problem(report), "install a torch build with distributed support"))
    cores = report["cpu_count"] or 1
    if not report["cuda_available"] and nproc_per_node > cores:
        traps.append(
            Trap(
                "warning",
                f"{nproc_per_node} processes on {cores} cores: the ranks take turns on the cores, and "
                "every collective waits for the rank that is not running",
                f"use at most {cores} processes per node for timing; more only to test behaviour",
            )
        )
    gpus = report.get("gpu_count", 0)
    if report["cuda_available"] and nproc_per_node > gpus:
        traps.append(
            Trap(
                "error",
                f"{nproc_per_node} processes on {gpus} GPU(s): the examples give each process a GPU of its own "
                "under nccl, which refuses two ranks on one GPU; a rank without one stops at once",
                f"--nproc_per_node={gpus}, or CUDA_VISIBLE_DEVICES= to run every process on the CPU with gloo",
            )
        )
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) * nproc_per_node > cores:
        traps.append(
            Trap(
                "warning",
                f"OMP_NUM_THREADS={threads} for each of {nproc_per_node} processes is "
                f"{int(threads) * nproc_per_node} threads on {cores} cores: they slow each other down",
                f"OMP_NUM_THREADS={max(1, cores // nproc_per_node)} (the cores divided by the processes)",
            )
        )
    holder = port_holder(port)
    if holder is not None:
        traps.append(
            Trap(
                "warning",
                f"port {port} is in use{holder}: a launch with --master-port={port} fails with "
                f"EADDRINUSE, and one with --rdzv-endpoint=...:{port} may wait on whatever listens there",
                "torchrun --standalone picks a free port; else pick another port, or stop that process",
            )
        )
    traps += localhost_traps()
    for pid, command in stale_launchers():
        traps.append(
            Trap(
                "warning",
                f"a launcher is already running: pid {pid}: {command}",
                f"if it is left over from an earlier run, stop it (kill {pid}); it holds ports and cores",
            )
        )
    return traps


def port_holder(port: int) -> str | None:
    """None if 127.0.0.1:`port` can be bound; else a phrase naming who holds it, where Linux's
    /proc says."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return None
        except OSError:
            pass
    inodes = {inode for _, listening_port, inode in listening_sockets() if listening_port == port}
    for proc in Path("/proc").glob("[0-9]*"):
        if socket_inodes(int(proc.name)) & inodes:
            return f" by pid {proc.name} ({command_line(int(proc.name))})"
    return ""


def localhost_traps() -> list[Trap]:
    """torchrun --standalone meets its workers at `localhost`: it must resolve, and to an address
    that works."""
    try:
        infos = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return [Trap("error", "`localhost` does not resolve", "add `127.0.0.1 localhost` to /etc/hosts")]
    family, *_, address = infos[0]
    if family == socket.AF_INET6 and not can_bind(socket.AF_INET6, address[0]):
        return [
            Trap(
                "warning",
                f"`localhost` resolves first to {address[0]}, an IPv6 address this machine cannot use",
                "put `127.0.0.1 localhost` first in /etc/hosts, or launch with --rdzv-endpoint=127.0.0.1:PORT",
            )
        ]
    return []


def can_bind(family: int, address: str) -> bool:
    try:
        with socket.socket(family) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def stale_launchers() -> list[tuple[int, str]]:
    """torchrun processes other than this one and its ancestors (Linux /proc)."""
    mine, pid = set(), os.getpid()
    while pid > 1:  # this process and its ancestors: a doctor run from a torchrun is not stale
        mine.add(pid)
        stat = process_stat(pid)
        if stat is None:
            break
        pid = stat.ppid
    found = []
    for pid in pids():
        command = command_line(pid)
        words = command.split()
        launcher = any(w.endswith("/torchrun") or w == "torchrun" for w in words[:2]) or (
            "torch.distributed.run" in words[:3] or "torch.distributed.launch" in words[:3]
        )
        if launcher and pid not in mine:
            found.append((pid, command))
    return sorted(found)


def format_traps(traps: list[Trap]) -> str:
    if not traps:
        return "no traps found: distributed runs should work here"
    return "\n".join(f"{t.level}: {t.message}\n  fix: {t.fix}" for t in traps)
