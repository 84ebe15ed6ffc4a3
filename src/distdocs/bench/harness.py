"""What every benchmark shares: the machine it ran on, the slowest-rank timer, medians, byte sizes,
and saving the records as JSON with a TXT table beside them."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics

import torch
from torch import nn

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
