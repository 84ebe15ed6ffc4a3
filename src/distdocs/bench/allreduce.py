"""gloo's all_reduce against distdocs' ring, tree and naive allreduces: time, algbw, busbw.

The sweep (distdocs.bench.allreduce_sweep, which says how it takes turns and checks each sum) runs
every implementation on the same ranks, size by size. This reports what nccl-tests reports:

- time: the median over iterations of the slowest rank's time;
- algbw = bytes / time;
- busbw = algbw * 2(n-1)/n, the bytes each rank's link carries in a ring, so that numbers for
  different world sizes compare with the hardware's bandwidth.

With `--link RATE` the ranks run in `--nodes` network namespaces, spread evenly (distdocs.lab.links),
and every node's link to the others carries at most RATE each way: the sweep then measures the link
you dialled instead of loopback. Each record names its link ("loopback" or the rate) and its nodes.
The `check` rows time the input handshake that our allreduces run unless `validate=False`.
"""

from __future__ import annotations

import argparse
import math

from distdocs.arguments import parse_list, parse_rate, parse_size, require
from distdocs.bench.allreduce_sweep import DEFAULT_IMPLS, IMPLS, bench_allreduce
from distdocs.bench.harness import WARMUP, machine_line, parse_links


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
    α-β line fitted to gloo's timings at each world size (distdocs.calculators.fits.fit_alpha_beta)."""
    from distdocs.calculators.costmodel import allreduce_seconds
    from distdocs.calculators.fits import fit_alpha_beta
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
    from distdocs.calculators.fits import fit_alpha_beta

    records = [r | {"time_s": r.get("best_s", r["time_s"])} for r in records]
    fits = []
    for link, n in sorted({(r.get("link", "loopback"), r["world_size"]) for r in records if r["impl"] == "gloo"}):
        fit = fit_alpha_beta(records, "gloo", world_size=n, link=link)
        bits = 8 / fit.network.beta
        dialled = None if link == "loopback" else parse_rate(link)
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
