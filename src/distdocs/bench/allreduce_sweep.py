"""The allreduce sweep that several benchmarks run: gloo's all_reduce and distdocs' ring, tree, naive
and two-level allreduces timed size by size, in fresh worlds, over loopback or spread over the nodes
of a dialled link. `bench allreduce` reports it whole; `bench prediction`, `compression` and
`hierarchy` fit α and β to gloo's part of it (distdocs.calculators.fits.fit_alpha_beta), and
`hierarchy` times its own allreduces with it too.

Every implementation runs on the same ranks, size by size, taking turns iteration by iteration so
that a noisy moment hits all of them alike; each record holds what nccl-tests reports (time, algbw,
busbw). Before timing a size, each result is checked: every rank contributes rank+1, so the sum must
be n(n+1)/2 exactly. Our implementations run with `validate=False`, since gloo validates nothing;
the input handshake that `validate=True` adds is timed on its own, in the `check` rows.
"""

from __future__ import annotations

import contextlib
import functools
import statistics

import torch
import torch.distributed as dist

from distdocs.bench.harness import WARMUP, median_after_warmup, slowest_rank_seconds, world_on
from distdocs.training.collectives import (
    check_same_tensor_everywhere,
    naive_allreduce,
    node_groups,
    ring_allreduce,
    tree_allreduce,
    two_level_allreduce,
)

IMPLS = ("gloo", "ring", "tree", "naive", "two-level")
DEFAULT_IMPLS = IMPLS[:4]  # two-level splits the ranks into nodes: ask for it by name
OURS = {"ring": ring_allreduce, "tree": tree_allreduce, "naive": naive_allreduce}
# The sizes of a sweep that α and β are fitted to. Over loopback, 256 KiB to 64 MiB, around the
# gradients of the models the benchmarks train. Over a dialled link, the bucket of the rate limit
# passes small messages at memory speed and large ones take seconds: 1 MiB to 4 MiB there.
SWEEP_SIZES = [2**18, 2**20, 2**22, 2**24, 2**26]
LINK_SWEEP_SIZES = [2**20, 2**22]


def _run_impl(name: str, x: torch.Tensor, groups: tuple = ()) -> None:
    if name == "gloo":
        dist.all_reduce(x)
    elif name == "two-level":
        two_level_allreduce(x, *groups, validate=False)
    else:
        OURS[name](x, validate=False)


def _record(
    impl: str, world_size: int, nbytes: int, iters: int, t: float, dtype: str = "float32", best: float | None = None
) -> dict:
    algbw = nbytes / t / 1e9
    record = {
        "impl": impl,
        "world_size": world_size,
        "bytes": nbytes,
        "dtype": dtype,
        "iters": iters,
        "time_s": t,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
    }
    return record | ({"best_s": best} if best is not None else {})  # the fastest iteration: see allreduce.link_fits


def _time_sizes(
    rank: int,
    world_size: int,
    sizes: list[int],
    iters: int,
    warmup: int,
    impls: tuple[str, ...] = DEFAULT_IMPLS,
    nodes: int = 2,
) -> list[dict]:
    groups = node_groups(world_size // nodes) if "two-level" in impls else ()  # ranks fill nodes in order
    records = []
    for nbytes in sizes:
        x = torch.empty(nbytes // 4, dtype=torch.float32)
        for name in impls:
            x.fill_(rank + 1)
            _run_impl(name, x, groups)
            if not bool((x == world_size * (world_size + 1) / 2).all()):
                raise AssertionError(f"{name} allreduce of {nbytes} bytes gave a wrong sum")
        times: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(warmup + iters):
            for name in impls:  # take turns, so that a noisy moment hits every implementation alike
                times[name].append(slowest_rank_seconds(functools.partial(_run_impl, name, x, groups)))
        records += [
            _record(
                name,
                world_size,
                nbytes,
                iters,
                median_after_warmup(times[name], warmup),
                best=min(times[name][warmup:]),
            )
            for name in impls
        ]
    # The input handshake that ring_allreduce runs unless validate=False: one all_reduce of 6 int64s.
    handshake = [slowest_rank_seconds(lambda: check_same_tensor_everywhere(x)) for _ in range(warmup + iters)]
    return records + [_record("check", world_size, 48, iters, median_after_warmup(handshake, warmup), "int64")]


def bench_allreduce(
    world_sizes: list[int],
    sizes: list[int],
    iters: int = 10,
    warmup: int = WARMUP,
    progress=None,
    repeat: int = 1,
    impls: list[str] | tuple[str, ...] = DEFAULT_IMPLS,
    link: str | None = None,
    nodes: int = 2,
) -> list[dict]:
    """Time every implementation at every size and world size, `repeat` times over in fresh worlds.
    Each record holds the median over repeats of the time, and of the busbw ratio to gloo taken within
    each repeat, with that ratio's lowest and highest value: on a shared machine the spread between
    runs is part of the result. With `link`, the ranks of each world are spread over `nodes` nodes of
    a fresh distdocs.lab.links.Network of that rate."""
    impls = tuple(impls)
    runs = []
    for r in range(repeat):
        records = []
        for n in world_sizes:
            if progress:
                progress(
                    f"run {r + 1}/{repeat}, world size {n}{f' on {nodes} nodes, {link} links' if link else ''}: "
                    f"{len(sizes)} sizes x {len(impls)} implementations x {iters} iterations"
                )
            with contextlib.ExitStack() as stack:
                found = world_on(stack, n, link, nodes).run(_time_sizes, sizes, iters, warmup, impls, nodes)[0]
            for x in found:
                x.update(link=link or "loopback", nodes=nodes if link else 1)
            records += found
        gloo = {(x["world_size"], x["bytes"]): x for x in records if x["impl"] == "gloo"}
        for x in records:
            base = gloo.get((x["world_size"], x["bytes"]))
            x["busbw_ratio_vs_gloo"] = x["busbw_gbps"] / base["busbw_gbps"] if base else None
        runs.append(records)
    merged = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        ratios = [x["busbw_ratio_vs_gloo"] for x in same if x["busbw_ratio_vs_gloo"] is not None]
        merged.append(
            {
                **_record(
                    first["impl"],
                    first["world_size"],
                    first["bytes"],
                    iters,
                    statistics.median(x["time_s"] for x in same),
                    first["dtype"],
                    statistics.median(x["best_s"] for x in same) if "best_s" in first else None,
                ),
                "link": first["link"],
                "nodes": first["nodes"],
                "repeats": repeat,
                "busbw_ratio_vs_gloo": statistics.median(ratios) if ratios else None,
                "ratio_range": [min(ratios), max(ratios)] if ratios else None,
            }
        )
    return merged
