"""float32 against bfloat16 autocast in DDP on 2 ranks: the step time, taking turns step by step, and
the bytes one forward keeps for backward (activations, and the 16-bit weight copies autocast adds)."""

from __future__ import annotations

import argparse

import torch
from torch import nn

from distdocs.arguments import require
from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, mlp, slowest_rank_seconds, table
from distdocs.lab.world import World

MODES = {"float32": None, "bfloat16 autocast": torch.bfloat16}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--width", type=int, default=1024, help="MLP width (default: 1024)")
    parser.add_argument("--depth", type=int, default=4, help="Linear layers (default: 4)")
    parser.add_argument("--batch", type=int, default=256, help="samples per rank and step (default: 256)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per mode (default: 10)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(
        min(args.width, args.depth, args.batch, args.steps) >= 1,
        "--width, --depth, --batch and --steps must be positive",
    )
    require(args.batch != args.width, "--batch must differ from --width, to tell activations from weights")
    return bench_precision(args.width, args.depth, args.batch, args.steps)


def _saved_bytes(model: nn.Module, x: torch.Tensor, dtype) -> dict:
    """Bytes that one forward keeps for backward: activations (a row per sample) and anything else
    that is not a parameter itself (autocast's 16-bit weight copies)."""
    params = {p.data_ptr() for p in model.parameters()}
    held = {"activation_bytes": 0, "weight_copy_bytes": 0}

    def pack(t):
        if t.data_ptr() not in params:
            key = "activation_bytes" if t.dim() > 0 and t.shape[0] == x.shape[0] else "weight_copy_bytes"
            held[key] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            model(x).float().square().mean().backward()
    return held


def _precision_sweep(rank: int, world_size: int, width: int, depth: int, batch: int, steps: int) -> list[dict]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    g = torch.Generator().manual_seed(rank)
    data = [torch.randn(batch, width, generator=g) for _ in range(WARMUP + steps)]
    held = {name: _saved_bytes(mlp(width, depth, nn.GELU), data[0], dtype) for name, dtype in MODES.items()}
    models = {name: DDP(mlp(width, depth, nn.GELU)) for name in MODES}
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}

    def step(name, x):
        with torch.autocast("cpu", dtype=MODES[name] or torch.float32, enabled=MODES[name] is not None):
            out = models[name](x)
        opts[name].zero_grad()
        out.float().square().mean().backward()
        opts[name].step()

    times: dict[str, list[float]] = {name: [] for name in MODES}
    for x in data:  # take turns, so that both see the same machine
        for name in MODES:
            times[name].append(slowest_rank_seconds(lambda: step(name, x)))
    return [
        {
            "mode": name,
            "world_size": world_size,
            "width": width,
            "depth": depth,
            "batch_per_rank": batch,
            "step_s": median_after_warmup(times[name]),
            **held[name],
        }
        for name in MODES
    ]


def bench_precision(width: int = 1024, depth: int = 4, batch: int = 256, steps: int = 10) -> list[dict]:
    with World(2, timeout_s=600) as world:
        return world.run(_precision_sweep, width, depth, batch, steps)[0]


def format_table(records: list[dict], machine: dict) -> str:
    r0, mib = records[0], 1 << 20
    return table(
        machine_line(machine, f"2 ranks, MLP {r0['depth']} x {r0['width']}, batch {r0['batch_per_rank']} per rank"),
        [("mode", 17), ("step (ms)", 10), ("vs float32", 10), ("activations (MiB)", 17), ("weight copies (MiB)", 19)],
        [
            [
                r["mode"],
                f"{r['step_s'] * 1e3:.1f}",
                f"{r0['step_s'] / r['step_s']:.2f}x",
                f"{r['activation_bytes'] / mib:.1f}",
                f"{r['weight_copy_bytes'] / mib:.1f}",
            ]
            for r in records
        ],
    )
