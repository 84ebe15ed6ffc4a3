"""torch DDP's two knobs, `bucket_cap_mb` and `gradient_as_bucket_view`: the step time of each
setting on a sync-bound MLP at 2 ranks, next to the same step without communication (`no_sync()`),
and the memory each setting keeps allocated, read from the C allocator."""

from __future__ import annotations

import argparse
import contextlib

import torch

from distdocs.arguments import parse_list, require
from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, mlp, slowest_rank_seconds
from distdocs.lab.world import World


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--caps", default="1,5,25,100", help="bucket caps in MiB (default: 1,5,25,100)")
    parser.add_argument("--width", type=int, default=1024, help="MLP width (default: 1024)")
    parser.add_argument("--depth", type=int, default=8, help="Linear layers (default: 8)")
    parser.add_argument("--batch", type=int, default=8, help="samples per rank and step (default: 8)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per setting (default: 10)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    caps = parse_list(args.caps, float, "--caps (MiB)", minimum=1e-3)
    require(
        min(args.width, args.depth, args.batch, args.steps) >= 1,
        "--width, --depth, --batch and --steps must be positive",
    )
    return bench_buckets(caps, args.width, args.depth, args.batch, args.steps)


def _malloc_in_use_bytes() -> int | None:
    """Bytes the C allocator has handed out and not taken back (glibc's mallinfo2: heap + mmapped),
    where torch's CPU tensors live. None where that call does not exist (macOS, musl, old glibc)."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError, TypeError):
        return None
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def _ddp_bytes(view: bool, width: int, depth: int, batch: int) -> int | None:
    """The memory a DDP model and its first steps keep allocated: parameters, DDP's buckets, and
    the gradients unless they are views into the buckets."""
    import gc

    from torch.nn.parallel import DistributedDataParallel as DDP

    gc.collect()
    before = _malloc_in_use_bytes()
    model = DDP(mlp(width, depth), gradient_as_bucket_view=view)
    for _ in range(3):
        model(torch.randn(batch, width)).square().mean().backward()
    gc.collect()
    after = _malloc_in_use_bytes()
    del model
    return after - before if before is not None and after is not None else None


def _bucket_sweep(
    rank: int, world_size: int, caps: list[float], width: int, depth: int, batch: int, steps: int
) -> list[dict]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    _ddp_bytes(False, width, depth, batch)  # the first DDP model also allocates gloo's buffers: not counted
    held = {view: _ddp_bytes(view, width, depth, batch) for view in (False, True)}
    g = torch.Generator().manual_seed(rank)
    data = [torch.randn(batch, width, generator=g) for _ in range(WARMUP + steps)]
    configs = [(cap, view) for view in (False, True) for cap in caps]
    models = {c: DDP(mlp(width, depth), bucket_cap_mb=c[0], gradient_as_bucket_view=c[1]) for c in configs}
    opts = {c: torch.optim.SGD(m.parameters(), lr=1e-3) for c, m in models.items()}

    def step(c, x):
        with models[c].no_sync() if c == "compute" else contextlib.nullcontext():
            models[c](x).square().mean().backward()  # "compute": the same step, all_reduces switched off
        opts[c].step()

    models["compute"], opts["compute"] = models[configs[0]], opts[configs[0]]
    times: dict = {c: [] for c in [*configs, "compute"]}
    for x in data:  # alternate the configurations step by step, so that all see the same machine
        for c in times:
            times[c].append(slowest_rank_seconds(lambda: step(c, x)))
            models[c].zero_grad(set_to_none=False)
    medians = {c: median_after_warmup(t) for c, t in times.items()}
    return [
        {
            "bucket_cap_mb": cap,
            "gradient_as_bucket_view": view,
            "world_size": world_size,
            "width": width,
            "depth": depth,
            "batch_per_rank": batch,
            "gradient_bytes": sum(p.numel() * p.element_size() for p in models[configs[0]].parameters()),
            "step_s": medians[(cap, view)],
            "compute_s": medians["compute"],
            "ddp_bytes": held[view],
        }
        for cap, view in configs
    ]


def bench_buckets(caps: list[float], width: int = 1024, depth: int = 8, batch: int = 8, steps: int = 10) -> list[dict]:
    """DDP's step time for each `bucket_cap_mb`, with and without `gradient_as_bucket_view`, on a
    sync-bound MLP at 2 ranks, next to the same step without communication; and the memory that
    each setting keeps allocated."""
    with World(2, timeout_s=600) as world:
        return world.run(_bucket_sweep, caps, width, depth, batch, steps)[0]


def format_table(records: list[dict], machine: dict) -> str:
    r0 = records[0]
    mib = 1 << 20
    lines = [
        machine_line(
            machine,
            f"2 ranks, MLP {r0['depth']} x {r0['width']}, batch {r0['batch_per_rank']} "
            f"per rank, {r0['gradient_bytes'] / mib:.1f} MiB of gradients; compute alone "
            f"{r0['compute_s'] * 1e3:.1f} ms",
        ),
        f"{'bucket_cap_mb':>13} {'as view':>7} {'step (ms)':>10} {'sync (ms)':>10} {'held (MiB)':>10}",
    ]
    for r in records:
        held = r["ddp_bytes"]
        lines.append(
            f"{r['bucket_cap_mb']:>13g} {str(r['gradient_as_bucket_view']):>7} "
            f"{r['step_s'] * 1e3:>10.1f} {(r['step_s'] - r['compute_s']) * 1e3:>10.1f} "
            f"{'-' if held is None else f'{held / mib:.0f}':>10}"
        )
    return "\n".join(lines)
