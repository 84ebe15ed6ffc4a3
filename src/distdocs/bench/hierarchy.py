"""Hierarchy: 2 nodes of 2 ranks each, loopback inside a node and a dialled link between the nodes.
The flat ring, the two-level allreduce (distdocs.training.collectives) and gloo's own all_reduce on the same
ranks, with the cost model's prediction of both of ours.

The model is fed from other runs than the one it predicts: the link inside a node from a gloo sweep
at 2 ranks on one node, over loopback; the link between the nodes from a gloo sweep at 2 nodes of 1
rank each. Both sweeps and the 4-rank run are repeated in fresh worlds, and medians kept.
"""

from __future__ import annotations

import argparse
import contextlib

from distdocs.arguments import parse_size, require
from distdocs.bench.allreduce_sweep import LINK_SWEEP_SIZES, SWEEP_SIZES, bench_allreduce
from distdocs.bench.harness import machine_line, mlp, node_sent_bytes, parse_links, table, world_on
from distdocs.calculators.costmodel import flat_ring_on_nodes_seconds, two_level_seconds
from distdocs.calculators.fits import fit_alpha_beta

RANKS_PER_NODE, NODES = 2, 2
MODELLED = {"ring": flat_ring_on_nodes_seconds, "two-level": two_level_seconds}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--link",
        metavar="RATES",
        default="1gbit,100mbit",
        help="comma-separated rates between the nodes, in tc's spelling (needs root; default: 1gbit,100mbit)",
    )
    parser.add_argument("--sizes", default="4M,16M", help="comma-separated byte counts, K/M/G binary (default: 4M,16M)")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per size (default: 5)")
    parser.add_argument("--repeat", type=int, default=1, help="whole runs, in fresh worlds; medians kept (default: 1)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    require(min(args.iters, args.repeat) >= 1, "--iters and --repeat must be at least 1")
    rates = [r for r in parse_links(args.link, [RANKS_PER_NODE * NODES], NODES) if r]
    require(bool(rates), "--link: give one or more rates, such as 100mbit; loopback has no link between nodes")
    records = bench_hierarchy(rates, sizes, args.iters, args.repeat, progress)
    if progress:
        progress(f"DDP, FSDP and HSDP on 2 nodes x 2 ranks over {rates[0]}: the bytes each node sends across")
    return records + bench_layouts(rates[0])


def bench_hierarchy(rates: list[str], sizes: list[int], iters: int = 5, repeat: int = 1, progress=None) -> list[dict]:
    """Per rate: the 4-rank records of gloo, ring and two-level, each of ours with the model's time."""
    if progress:
        progress("inside a node: gloo at 2 ranks over loopback, for alpha and beta")
    inside = fit_alpha_beta(bench_allreduce([2], SWEEP_SIZES, 10, repeat=repeat, impls=("gloo",)), world_size=2)
    records = []
    for link in rates:
        if progress:
            progress(f"{link}: gloo at 2 nodes x 1 rank for alpha and beta, then 2 nodes x 2 ranks")
        sweep = bench_allreduce([2], LINK_SWEEP_SIZES, iters, repeat=repeat, impls=("gloo",), link=link, nodes=NODES)
        between = fit_alpha_beta(sweep, world_size=2, link=link)
        found = bench_allreduce(
            [RANKS_PER_NODE * NODES],
            sizes,
            iters,
            repeat=repeat,
            impls=("gloo", "ring", "two-level"),
            link=link,
            nodes=NODES,
        )
        for r in (r for r in found if r["impl"] != "check"):
            r.update(
                ranks_per_node=RANKS_PER_NODE,
                inside_alpha_s=inside.network.alpha,
                inside_beta_s_per_byte=inside.network.beta,
                between_alpha_s=between.network.alpha,
                between_beta_s_per_byte=between.network.beta,
            )
            if r["impl"] in MODELLED:
                predicted = MODELLED[r["impl"]](r["bytes"], RANKS_PER_NODE, NODES, inside.network, between.network)
                r.update(predicted_s=predicted, ratio=predicted / r["time_s"])
            records.append(r)
    return records


def format_table(records: list[dict], machine: dict) -> str:
    allreduces = [r for r in records if "impl" in r]
    rows = []
    for r in allreduces:
        gloo = next(x for x in allreduces if (x["link"], x["bytes"], x["impl"]) == (r["link"], r["bytes"], "gloo"))
        rows.append(
            [
                r["link"],
                str(r["bytes"]),
                r["impl"],
                f"{r['time_s'] * 1e3:.1f}",
                f"{gloo['time_s'] / r['time_s']:.2f}x",
                f"{r['predicted_s'] * 1e3:.1f}" if "ratio" in r else "-",
                f"{r['ratio']:.2f}" if "ratio" in r else "-",
            ]
        )
    first = allreduces[0]
    setup = (
        f"2 nodes x 2 ranks, loopback inside a node; medians of {first['repeats']} runs; inside a node "
        f"{8 / first['inside_beta_s_per_byte'] / 1e9:.1f} Gbit/s (gloo, 2 ranks, loopback)"
    )
    columns = [
        ("link", 8),
        ("size (B)", 10),
        ("impl", 9),
        ("time (ms)", 9),
        ("vs gloo", 7),
        ("predicted", 9),
        ("ratio", 5),
    ]
    lines = [table(machine_line(machine, setup), columns, rows), "between the nodes, fit to gloo at 2 nodes x 1 rank:"]
    for link in dict.fromkeys(r["link"] for r in allreduces):
        r = next(x for x in allreduces if x["link"] == link)
        lines.append(
            f"  {link}: {8 / r['between_beta_s_per_byte'] / 1e6:.0f} Mbit/s, α {r['between_alpha_s'] * 1e6:.0f} µs"
        )
    layouts = [r for r in records if "layout" in r]
    if layouts:
        lines.append(f"bytes each node sends across per training step, MLP of {layouts[0]['gradient_bytes']} bytes:")
        for r in layouts:
            lines.append(
                f"  {r['layout']:>5}, node {r['node']}: {r['node_sent_bytes']:>10.0f} "
                f"({r['node_sent_bytes'] / r['gradient_bytes']:.2f} x the gradient)"
            )
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """Left, each allreduce's time on each link (bars) with the model's (ticks); right, the bytes
    each node sent across per step under DDP, FSDP and HSDP, in units of the gradient."""
    from distdocs.figures import pyplot, to_svg

    allreduces = [r for r in records if "impl" in r and r["bytes"] == max(x["bytes"] for x in records if "impl" in x)]
    layouts = [r for r in records if "layout" in r and r["node"] == 0]
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(9.6, 4.0))
    impls = list(dict.fromkeys(r["impl"] for r in allreduces))
    places = list(dict.fromkeys(r["link"] for r in allreduces))
    width = 0.8 / len(impls)
    for j, (impl, colour) in enumerate(zip(impls, ["0.6", "C0", "C1"])):
        mine = {r["link"]: r for r in allreduces if r["impl"] == impl}
        xs = [i + (j - (len(impls) - 1) / 2) * width for i in range(len(places))]
        left.bar(xs, [mine[p]["time_s"] * 1e3 for p in places], width, color=colour, label=f"{impl}: measured")
        if all("predicted_s" in mine[p] for p in places):
            left.plot(xs, [mine[p]["predicted_s"] * 1e3 for p in places], "_", color="black", markersize=14,
                      markeredgewidth=2)  # fmt: skip
    left.plot([], [], "_", color="black", markersize=14, markeredgewidth=2, label="cost model, two links")
    left.set(yscale="log", ylabel=f"allreduce of {allreduces[0]['bytes'] >> 20} MiB (ms, log scale)")
    left.set_xticks(range(len(places)), [f"{p} between nodes" for p in places])
    left.legend(fontsize=7, loc="upper left")
    right.bar(range(len(layouts)), [r["node_sent_bytes"] / r["gradient_bytes"] for r in layouts], 0.6, color="C2")
    right.set_xticks(range(len(layouts)), [r["layout"] for r in layouts])
    right.set(ylabel="bytes a node sends across per step / gradient bytes")
    fig.suptitle(
        f"2 nodes x 2 ranks; {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    return to_svg(fig)


LAYOUTS = ("DDP", "FSDP", "HSDP")


def _layout_bytes(rank: int, world_size: int, layout: str, width: int, steps: int) -> dict:
    """Train an MLP under `layout` on 2 nodes x 2 ranks and count what this rank's node sent over its
    link per step (/proc/net/dev inside the node's namespace; both ranks of a node read the same count)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = mlp(width, 4)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    if layout == "DDP":
        model = DDP(model)
    else:
        if layout == "FSDP":
            mesh = init_device_mesh("cpu", (world_size,))
        else:  # 2-D: replicate across nodes, shard inside (HSDP)
            mesh = init_device_mesh(
                "cpu", (world_size // RANKS_PER_NODE, RANKS_PER_NODE), mesh_dim_names=("replicate", "shard")
            )
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, width, generator=torch.Generator().manual_seed(rank))

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    step()  # warm-up: connections, buffers
    dist.barrier()
    before = node_sent_bytes()
    for _ in range(steps):
        step()
    dist.barrier()
    sent = node_sent_bytes() - before
    return {"layout": layout, "width": width, "gradient_bytes": params, "node_sent_bytes": sent / steps}


def bench_layouts(link: str, width: int = 512, steps: int = 3) -> list[dict]:
    """DDP, FSDP over all 4 ranks, and HSDP (sharded in a node, replicated across), each in a fresh
    world on 2 nodes of 2 ranks: the bytes each node sent across per step."""
    records = []
    for layout in LAYOUTS:
        with contextlib.ExitStack() as stack:
            found = world_on(stack, RANKS_PER_NODE * NODES, link, NODES, timeout_s=300).run(
                _layout_bytes, layout, width, steps
            )
        for node, r in enumerate(found[::RANKS_PER_NODE]):  # one rank per node: the node's count
            records.append({**r, "link": link, "node": node})
    return records
