"""gloo's all_reduce against distdocs' ring, tree and naive allreduces: time, algbw, busbw.

Every implementation runs on the same ranks, size by size, taking turns iteration by iteration so
that a noisy moment hits all of them alike. It reports what nccl-tests reports:

- time: the median over iterations of the slowest rank's time;
- algbw = bytes / time;
- busbw = algbw * 2(n-1)/n, the bytes each rank's link carries in a ring, so that numbers for
  different world sizes compare with the hardware's bandwidth.

With `--link RATE` the ranks run in `--nodes` network namespaces, spread evenly (distdocs.lab.links),
and every node's link to the others carries at most RATE each way: the sweep then measures the link
you dialled instead of loopback. Each record names its link ("loopback" or the rate) and its nodes.

Our implementations run with `validate=False`, since gloo validates nothing; the input handshake
that `validate=True` adds is timed on its own, in the `check` rows. Before timing a size, each
result is checked: every rank contributes rank+1, so the sum must be n(n+1)/2 exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import statistics

import torch
import torch.distributed as dist

from distdocs.arguments import UsageError, parse_list, parse_size, require
from distdocs.bench.harness import WARMUP, machine_line, median_after_warmup, slowest_rank_seconds
from distdocs.lab import links
from distdocs.lab.world import World
from distdocs.training.collectives import (
    check_same_tensor_everywhere,
    naive_allreduce,
    node_groups,
    ring_allreduce,
    tree_allreduce,
    two_level_allreduce,
)

IMPLS = ("gloo", "ring", "tree", "naive", "two-level")
DEFAULT_IMPLS = IMPLS[:4]  # two-level splits the ranks into --nodes nodes: ask for it by name
OURS = {"ring": ring_allreduce, "tree": tree_allreduce, "naive": naive_allreduce}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world-sizes", default="2,4", help="comma-separated (default: 2,4)")
    parser.add_argument(
        "--sizes", default="256K,4M,64M", help="comma-separated byte counts, K/M/G binary (default: 256K,4M,64M)"
    )
    parser.add_argument("--iters", type=int, default=10, help="timed iterations per size (default: 10)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"untimed iterations first (default: {WARMUP})")
    parser.add_argument(
        "--impls",
        default=",".join(DEFAULT_IMPLS),
        help=f"comma-separated, of {', '.join(IMPLS)} (default: {','.join(DEFAULT_IMPLS)})",
    )
    parser.add_argument(
        "--link",
        metavar="RATES",
        default="loopback",
        help="comma-separated: run the ranks on --nodes nodes joined by links of each rate, in tc's spelling "
        "(100mbit, 1gbit; needs root), or on one node over loopback (default: loopback)",
    )
    parser.add_argument("--nodes", type=int, default=2, help="nodes for --link; ranks spread evenly (default: 2)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the whole sweep this many times, in fresh processes, and report medians "
        "and the spread of the ratios (default: 1)",
    )


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    world_sizes = parse_list(args.world_sizes, int, "--world-sizes")
    impls = [name.strip() for name in args.impls.split(",") if name.strip()]
    require(
        min(args.iters, args.repeat) >= 1 and args.warmup >= 0,
        "--iters and --repeat must be at least 1, --warmup at least 0",
    )
    require(bool(impls) and set(impls) <= set(IMPLS), f"--impls: expected some of {', '.join(IMPLS)}, got {args.impls}")
    uneven = [n for n in world_sizes if n % args.nodes]
    require(
        "two-level" not in impls or not uneven, f"--impls two-level: --nodes {args.nodes} must divide every world size"
    )
    records = []
    for link in parse_links(args.link, world_sizes, args.nodes):
        records += bench_allreduce(
            world_sizes, sizes, args.iters, args.warmup, progress, args.repeat, impls, link, args.nodes
        )
    return records


def parse_links(text: str, world_sizes: list[int], nodes: int) -> list[str | None]:
    """--link's comma-separated rates, checked: None for loopback. A dialled rate needs root, and
    `nodes` (2 or more) dividing every world size above 1; either missing is a UsageError."""
    rates = [r.strip() for r in text.split(",") if r.strip()]
    require(bool(rates), "--link: expected loopback or a rate such as 100mbit")
    for rate in (r for r in rates if r != "loopback"):
        try:
            links.rate_bits(rate)
        except ValueError as e:
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
    return record | ({"best_s": best} if best is not None else {})  # the fastest iteration: see link_fits


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


def format_table(records: list[dict], machine: dict) -> str:
    """nccl-tests' columns, one line per implementation, size and world size."""
    repeats = records[0]["repeats"]
    dialled = any(r.get("link", "loopback") != "loopback" for r in records)
    lines = [
        machine_line(machine, f"medians of {repeats} runs" if repeats > 1 else "one run"),
        f"{'link':>8} {'nodes':>5} "
        * dialled
        + f"{'ranks':>5} {'size (B)':>10} {'impl':>5} {'time (us)':>10} {'algbw (GB/s)':>12} "
        f"{'busbw (GB/s)':>12} {'vs gloo':>7} {'(lowest-highest)':>16}",
    ]
    for r in records:
        ratio, spread = "", ""
        if r["impl"] not in ("gloo", "check") and r["busbw_ratio_vs_gloo"] is not None:
            ratio = f"{r['busbw_ratio_vs_gloo']:.2f}x"
            if r.get("repeats", 1) > 1:
                spread = f"{r['ratio_range'][0]:.2f}-{r['ratio_range'][1]:.2f}"
        lines.append(
            f"{r.get('link', 'loopback'):>8} {r.get('nodes', 1):>5} " * dialled
            + f"{r['world_size']:>5} {r['bytes']:>10} {r['impl']:>5} {r['time_s'] * 1e6:>10.1f} "
            f"{r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f} {ratio:>7} {spread:>16}".rstrip()
        )
    if dialled:
        lines.append("α-β fit to gloo's times, link by link:")
        for f in link_fits(records):
            of = f", {f['of_dialled']:.2f} of the rate dialled" if f["of_dialled"] else ""
            lines.append(
                f"  {f['link']}, {f['world_size']} ranks on {f['nodes']} node{'s' * (f['nodes'] > 1)}: "
                f"{_rate_words(f['bits_per_s'])}{of}, α {f['alpha_s'] * 1e6:.0f} µs"
            )
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """Bus bandwidth against message size, one line per implementation and world size, with the
    α-β line fitted to gloo's timings at each world size (distdocs.calculators.costmodel.fit_alpha_beta)."""
    from distdocs.calculators.costmodel import allreduce_seconds, fit_alpha_beta
    from distdocs.figures import pyplot, to_svg

    if len({r.get("link", "loopback") for r in records}) > 1:
        return plot_links(records, machine)
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    rows = [r for r in records if r["impl"] != "check"]
    for n, style in zip(sorted({r["world_size"] for r in rows}), ["-", "--", ":"]):
        for impl, marker in zip(DEFAULT_IMPLS, ["o", "s", "^", "x"]):
            mine = sorted((r for r in rows if (r["impl"], r["world_size"]) == (impl, n)), key=lambda r: r["bytes"])
            ax.plot(
                [r["bytes"] for r in mine],
                [r["busbw_gbps"] for r in mine],
                marker + style,
                label=f"{impl}, {n} ranks",
                alpha=0.8,
            )
        fit = fit_alpha_beta(rows, "gloo", world_size=n)
        sizes = [2.0**k for k in range(16, 27)]
        busbw = [s * 2 * (n - 1) / n / allreduce_seconds(s, n, fit.network) / 1e9 for s in sizes]
        ax.plot(
            sizes,
            busbw,
            color="0.5",
            linestyle=style,
            linewidth=1,
            label=f"α-β fit, {n} ranks: α {fit.network.alpha * 1e6:.0f} µs, {fit.network.gb_per_s:.2f} GB/s",
        )
    ax.set(xscale="log", xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)")
    ax.set_title(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return to_svg(fig)


def link_fits(records: list[dict]) -> list[dict]:
    """The α-β fit to gloo's timings for each link and world size: fitted bandwidth in bits per
    second, and for a dialled link that bandwidth over the rate dialled. It fits each size's fastest
    iteration (`best_s`), as iperf reports a link by its best transfer: on a shared machine a rank
    that waits for a CPU only ever adds time, and the link's rate is what an undisturbed transfer
    shows. (A full test run once took 2 of 3 iterations slow enough to put a 100 Mbit/s fit at 0.83.)"""
    from distdocs.calculators.costmodel import fit_alpha_beta

    records = [r | {"time_s": r.get("best_s", r["time_s"])} for r in records]
    fits = []
    for link, n in sorted({(r.get("link", "loopback"), r["world_size"]) for r in records if r["impl"] == "gloo"}):
        fit = fit_alpha_beta(records, "gloo", world_size=n, link=link)
        bits = 8 / fit.network.beta
        dialled = None if link == "loopback" else links.rate_bits(link)
        fits.append(
            {
                "link": link,
                "world_size": n,
                "nodes": next(
                    r.get("nodes", 1) for r in records if (r.get("link", "loopback"), r["world_size"]) == (link, n)
                ),
                "alpha_s": fit.network.alpha,
                "bits_per_s": bits,
                "of_dialled": bits / dialled if dialled else None,
                "relative_rms": fit.relative_rms,
            }
        )
    return fits


def plot_links(records: list[dict], machine: dict) -> str:
    """gloo's bus bandwidth against message size over each link (loopback and dialled rates), with
    the α-β fit at each link and world size; the legend gives the fitted bandwidth."""
    from distdocs.calculators.costmodel import Network, allreduce_seconds
    from distdocs.figures import pyplot, to_svg

    fig, ax = pyplot().subplots(figsize=(6.4, 4.4))
    fits = {(f["link"], f["world_size"]): f for f in link_fits(records)}
    colours = iter(["C0", "C1", "C2", "C3", "C4", "C5"])
    for link in dict.fromkeys(r.get("link", "loopback") for r in records):
        colour = next(colours)
        for n, (marker, style) in zip(
            sorted({r["world_size"] for r in records}), [("o", "-"), ("s", "--"), ("^", ":")]
        ):
            mine = sorted(
                (
                    r
                    for r in records
                    if r["impl"] == "gloo" and (r.get("link", "loopback"), r["world_size"]) == (link, n)
                ),
                key=lambda r: r["bytes"],
            )
            if not mine:
                continue
            fit = fits[(link, n)]
            where = f"{n} ranks on {fit['nodes']} nodes" if fit["nodes"] > 1 else f"{n} ranks on one node"
            ax.plot([r["bytes"] for r in mine], [r["busbw_gbps"] for r in mine], marker, color=colour, alpha=0.8)
            net = Network(fit["alpha_s"], 8 / fit["bits_per_s"])
            low, high = math.log2(mine[0]["bytes"]), math.log2(mine[-1]["bytes"])
            sizes = [2 ** (low + (high - low) * k / 20) for k in range(21)]  # the measured range only
            ax.plot(
                sizes,
                [s * 2 * (n - 1) / n / allreduce_seconds(s, n, net) / 1e9 for s in sizes],
                style,
                color=colour,
                linewidth=1,
                label=f"{link}, {where}: fit {_rate_words(fit['bits_per_s'])}",
            )
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="gloo bus bandwidth (GB/s)")
    ax.set_title(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    measured = [r["bytes"] for r in records if r["impl"] == "gloo"]
    ax.set_xlim(min(measured) / 100, max(measured) * 2)  # room on the left for the legend
    ax.legend(fontsize=7, loc="center left")
    fig.tight_layout()
    return to_svg(fig)


def _rate_words(bits_per_s: float) -> str:
    return f"{bits_per_s / 1e9:.2f} Gbit/s" if bits_per_s >= 1e9 else f"{bits_per_s / 1e6:.0f} Mbit/s"
