"""What every benchmark shares: the machine it ran on, the slowest-rank timer, medians (of a run's
iterations, and of whole runs), the ranks' world and the links it sits on, the bytes a node sent, and
saving the records as JSON with a TXT table beside them."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import statistics

import torch
from torch import nn

from distdocs.arguments import UsageError, parse_rate, require
from distdocs.lab import links
from distdocs.lab.world import World
from distdocs.training.timing import slowest_rank_seconds  # noqa: F401  (every benchmark's timer)

# Untimed iterations before the timed ones, in every benchmark: the first steps allocate buffers,
# connect gloo's pairs and warm caches.
WARMUP = 2


def machine_info() -> dict:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "backend": "gloo",
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def machine_line(machine: dict, setup: str = "") -> str:
    """The comment line that opens every saved table: where it ran, then what was run."""
    line = (
        f"# {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['backend']}, "
        f"{machine['date']}"
    )
    return f"{line}; {setup}" if setup else line


def median_after_warmup(times: list[float], warmup: int = WARMUP) -> float:
    """The median of the timed iterations, the first `warmup` left out."""
    if len(times) <= warmup:
        raise ValueError(f"{len(times)} iterations leave none after {warmup} warm-up ones")
    return statistics.median(times[warmup:])


def merge_runs(runs: list[list[dict]]) -> list[dict]:
    """Per setting, the median of every number over the runs, and the lowest and highest ratio where
    a row has one: on a shared machine the spread between runs is part of the result."""
    merged = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        row = {k: (statistics.median(r[k] for r in same) if isinstance(v, float) else v) for k, v in first.items()}
        row["repeats"] = len(runs)
        if "ratio" in first:
            row["ratio_range"] = [min(r["ratio"] for r in same), max(r["ratio"] for r in same)]
        merged.append(row)
    return merged


def parse_links(text: str, world_sizes: list[int], nodes: int) -> list[str | None]:
    """--link's comma-separated rates, checked: None for loopback. A dialled rate needs root, and
    `nodes` (2 or more) dividing every world size above 1; either missing is a UsageError."""
    rates = [r.strip() for r in text.split(",") if r.strip()]
    require(bool(rates), "--link: expected loopback or a rate such as 100mbit")
    for rate in (r for r in rates if r != "loopback"):
        try:
            parse_rate(rate)
        except UsageError as e:
            raise UsageError(f"--link: {e}") from None
        uneven = [n for n in world_sizes if n > 1 and n % nodes]
        require(nodes >= 2 and not uneven, f"--nodes {nodes}: need 2 or more, dividing every world size")
        try:
            links.check_can_build()
        except links.LinkError as e:
            raise UsageError(str(e)) from None
    return [None if r == "loopback" else r for r in rates]


def world_on(stack: contextlib.ExitStack, n: int, link: str | None, nodes: int, timeout_s: float = 600) -> World:
    """A World of `n` ranks entered on `stack`: over loopback, or (with `link`, for n > 1) spread
    evenly over `nodes` nodes of a fresh distdocs.lab.links.Network of that rate."""
    places = None
    if link and n > 1:
        net = stack.enter_context(links.Network(nodes, link))
        places = [net.node(rank * nodes // n).namespace for rank in range(n)]
    return stack.enter_context(World(n, timeout_s=timeout_s, namespaces=places))


def node_sent_bytes(device: str = "eth0") -> int | None:
    """The bytes this node's link has sent, from /proc/net/dev (which shows the reader's namespace);
    None over loopback, where the ranks are not on nodes of a distdocs.lab.links.Network. Read it
    in a rank, before and after what it counts: every rank of a node reads the node's one count."""
    if os.environ.get("GLOO_SOCKET_IFNAME") != device:  # World sets it in a node
        return None
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counts = line.partition(":")
            if name.strip() == device:
                return int(counts.split()[8])
    return None


def mlp(width: int, depth: int, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """`depth` square Linear layers of `width`, each followed by `activation`; the same weights on
    every rank (seed 0)."""
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), activation())])


def add_step_flags(parser) -> None:
    """The flags of the benchmarks that time DDP steps with and without accumulation (scaling, prediction)."""
    parser.add_argument("--accumulation", default="1,4", help="micro-batches per step, comma-separated (default: 1,4)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per setting (default: 8)")


def table(title: str, columns: list[tuple[str, int]], rows: list[list[str]]) -> str:
    """A saved table: its title (machine_line), a header, then the rows; every cell right-aligned to its
    column's width, one space apart. Each benchmark's format_table gives its columns and cells."""

    def line(cells: list[str]) -> str:
        return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns, strict=True))

    return "\n".join([title, line([name for name, _ in columns]), *(line(row) for row in rows)])


def save(prefix: str, machine: dict, records: list[dict], table: str) -> None:
    """Write PREFIX.json ({machine, records}) and PREFIX.txt (the table the pages include)."""
    with open(f"{prefix}.json", "w") as f:
        json.dump({"machine": machine, "records": records}, f, indent=2)
    with open(f"{prefix}.txt", "w") as f:
        f.write(table + "\n")
