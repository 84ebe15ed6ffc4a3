"""Benchmarks of data-parallel training, measured on the same ranks in one run: torch's DDP next to
distdocs' BucketedDDP (`distdocs bench ddp`), and torch DDP's two knobs, `bucket_cap_mb` and
`gradient_as_bucket_view` (`distdocs bench buckets`)."""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.distributed as dist

from distdocs.bench import machine_line
from distdocs.launch import World


def _ddp_step_times(rank: int, world_size: int, batch: int, width: int, steps: int) -> dict:
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from distdocs.ddp import BucketedDDP

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                             nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

    g = torch.Generator().manual_seed(rank)
    data = [(torch.randn(batch, width, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(steps)]
    wrapped = {"torch DDP": DDP(make()), "BucketedDDP": BucketedDDP(make())}
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in wrapped.items()}
    times: dict[str, list[float]] = {name: [] for name in wrapped}
    for x, y in data:  # alternate, so that both see the same machine
        for name, model in wrapped.items():
            dist.barrier()
            start = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            opts[name].zero_grad()
            loss.backward()
            opts[name].step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t[2:]) for name, t in times.items()}


def bench_ddp(batch: int = 256, width: int = 1024, steps: int = 12) -> list[dict]:
    """Samples/s of torch's DDP and distdocs' BucketedDDP on the same 2 ranks, steps alternating."""
    with World(2, timeout_s=600) as world:
        step_s = world.run(_ddp_step_times, batch, width, steps)[0]
    base = batch * 2 / step_s["torch DDP"]
    return [{"impl": name, "world_size": 2, "batch_per_rank": batch, "width": width, "step_s": t,
             "samples_per_s": batch * 2 / t, "ratio_vs_torch": batch * 2 / t / base}
            for name, t in step_s.items()]


def format_ddp_table(records: list[dict], machine: dict) -> str:
    r0 = records[0]
    lines = [machine_line(machine, f"2 ranks, MLP width {r0['width']}, batch {r0['batch_per_rank']} per rank"),
             f"{'impl':>12} {'step (ms)':>10} {'samples/s':>10} {'vs torch DDP':>13}"]
    for r in records:
        lines.append(f"{r['impl']:>12} {r['step_s'] * 1e3:>10.1f} {r['samples_per_s']:>10.0f} "
                     f"{r['ratio_vs_torch']:>12.2f}x")
    return "\n".join(lines)


def _mlp(width: int, depth: int):
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])


def _malloc_in_use_bytes() -> int | None:
    """Bytes the C allocator has handed out and not taken back (glibc's mallinfo2: heap + mmapped),
    where torch's CPU tensors live. None where that call does not exist (macOS, musl, old glibc)."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

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
    model = DDP(_mlp(width, depth), gradient_as_bucket_view=view)
    for _ in range(3):
        model(torch.randn(batch, width)).square().mean().backward()
    gc.collect()
    after = _malloc_in_use_bytes()
    del model
    return after - before if before is not None and after is not None else None


def _bucket_sweep(rank: int, world_size: int, caps: list[float], width: int, depth: int, batch: int,
                  steps: int) -> list[dict]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    _ddp_bytes(False, width, depth, batch)  # the first DDP model also allocates gloo's buffers: not counted
    held = {view: _ddp_bytes(view, width, depth, batch) for view in (False, True)}
    g = torch.Generator().manual_seed(rank)
    data = [torch.randn(batch, width, generator=g) for _ in range(steps)]
    configs = [(cap, view) for view in (False, True) for cap in caps]
    models = {c: DDP(_mlp(width, depth), bucket_cap_mb=c[0], gradient_as_bucket_view=c[1]) for c in configs}
    opts = {c: torch.optim.SGD(m.parameters(), lr=1e-3) for c, m in models.items()}
    times: dict = {c: [] for c in [*configs, "compute"]}
    for x in data:  # alternate the configurations step by step, so that all see the same machine
        for c in times:
            model = models[configs[0]] if c == "compute" else models[c]
            sync = model.no_sync() if c == "compute" else contextlib.nullcontext()
            dist.barrier()
            start = time.perf_counter()
            with sync:  # "compute": the same step with the all_reduces switched off
                model(x).square().mean().backward()
            (opts[configs[0]] if c == "compute" else opts[c]).step()
            times[c].append(time.perf_counter() - start)
            model.zero_grad(set_to_none=False)
    medians = {c: statistics.median(t[2:]) for c, t in times.items()}
    return [{"bucket_cap_mb": cap, "gradient_as_bucket_view": view, "world_size": world_size,
             "width": width, "depth": depth, "batch_per_rank": batch,
             "gradient_bytes": sum(p.numel() * p.element_size() for p in models[configs[0]].parameters()),
             "step_s": medians[(cap, view)], "compute_s": medians["compute"], "ddp_bytes": held[view]}
            for cap, view in configs]


def bench_buckets(caps: list[float], width: int = 1024, depth: int = 8, batch: int = 8,
                  steps: int = 12) -> list[dict]:
    """DDP's step time for each `bucket_cap_mb`, with and without `gradient_as_bucket_view`, on a
    sync-bound MLP at 2 ranks, next to the same step without communication; and the memory that
    each setting keeps allocated."""
    with World(2, timeout_s=600) as world:
        return world.run(_bucket_sweep, caps, width, depth, batch, steps)[0]


def format_buckets_table(records: list[dict], machine: dict) -> str:
    r0 = records[0]
    mib = 1 << 20
    lines = [machine_line(machine, f"2 ranks, MLP {r0['depth']} x {r0['width']}, batch {r0['batch_per_rank']} "
                          f"per rank, {r0['gradient_bytes'] / mib:.1f} MiB of gradients; compute alone "
                          f"{r0['compute_s'] * 1e3:.1f} ms"),
             f"{'bucket_cap_mb':>13} {'as view':>7} {'step (ms)':>10} {'sync (ms)':>10} {'held (MiB)':>10}"]
    for r in records:
        held = r["ddp_bytes"]
        lines.append(f"{r['bucket_cap_mb']:>13g} {str(r['gradient_as_bucket_view']):>7} "
                     f"{r['step_s'] * 1e3:>10.1f} {(r['step_s'] - r['compute_s']) * 1e3:>10.1f} "
                     f"{'-' if held is None else f'{held / mib:.0f}':>10}")
    return "\n".join(lines)
