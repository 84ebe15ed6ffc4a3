"""The cost model against measurement: the DDP step time that distdocs.calculators.costmodel predicts at 1 and 2
ranks, next to the measured one, for a compute-bound and a sync-bound model, each with and without
accumulation.

The model's inputs come from runs that are not the one predicted: the computation per sample and
DDP's own per-sync work (copying gradients into its buckets and back) from the 1-rank run, and α
and β from a gloo allreduce sweep at 2 ranks. On CPU ranks the sync does not overlap the backward
pass (each rank's core does both), so the model adds it whole. Each record also splits the
difference: computation at n ranks against at 1, the sync DDP paid against the α-β sync, and the
ratio once the computation measured at n ranks replaces the 1-rank one.
"""

from __future__ import annotations

import argparse

from distdocs.arguments import parse_list, require
from distdocs.bench.allreduce_sweep import LINK_SWEEP_SIZES, SWEEP_SIZES, bench_allreduce
from distdocs.bench.ddp_steps import MODELS, bench_scaling
from distdocs.bench.harness import add_step_flags, machine_line, merge_runs, parse_links
from distdocs.calculators.costmodel import Network, step_time
from distdocs.calculators.fits import fit_alpha_beta, workload_from_scaling


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_step_flags(parser)
    parser.add_argument(
        "--repeat", type=int, default=3, help="whole comparisons, each in fresh processes; medians kept (default: 3)"
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)} (default: both)"
    )
    parser.add_argument(
        "--compute-at-n",
        action="store_true",
        help="feed the model the computation at n ranks, measured in a run of its own on one machine, in "
        "place of the 1-rank one: ranks that share a machine slow each other's computation",
    )
    parser.add_argument(
        "--link",
        metavar="RATES",
        default="loopback",
        help="comma-separated: put the 2 ranks on 2 nodes joined by links of each rate, in tc's spelling "
        "(100mbit, 1gbit; needs root), or on one node over loopback (default: loopback)",
    )


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    accumulation = parse_list(args.accumulation, int, "--accumulation")
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    require(args.steps >= 1 and args.repeat >= 1, "--steps and --repeat must be positive")
    require(bool(names) and set(names) <= set(MODELS), f"--models: expected some of {', '.join(MODELS)}")
    models = {name: MODELS[name] for name in names}
    records = []
    for link in parse_links(args.link, [2], nodes=2):
        # Over a dialled link, fewer sizes and iterations: large messages take seconds there.
        sizes, iters = (SWEEP_SIZES, 10) if link is None else (LINK_SWEEP_SIZES, 5)
        runs = []
        for i in range(args.repeat):
            if progress:
                where = f"over {link} links" if link else "over loopback"
                progress(
                    f"run {i + 1}/{args.repeat} {where}: allreduce sweep at 2 ranks for alpha and beta, then DDP steps"
                )
            sweep = bench_allreduce([2], sizes, iters=iters, impls=("gloo",), link=link, nodes=2)
            fit = fit_alpha_beta(sweep, "gloo", world_size=2, link=link or "loopback")
            measured = bench_scaling([1, 2], accumulation, args.steps, models, link=link)
            side_by_side = None
            if args.compute_at_n:  # another run: 2 ranks on this machine, whose no_sync steps give the compute
                shared = bench_scaling([2], accumulation, args.steps, models)
                side_by_side = {(r["model"], r["accumulation"]): r["compute_s"] for r in shared}
            runs.append(compare(measured, fit.network, fit.relative_rms, side_by_side))
        records += [{**r, "link": link} if link else r for r in merge_runs(runs)]
    return records


def compare(
    measured: list[dict], network: Network, fit_rms: float = 0.0, compute_at_2: dict | None = None
) -> list[dict]:
    """Predicted and measured step time for every scaling record, with the terms split. With
    `compute_at_2` ({(model, accumulation): seconds}, from a run of its own), the model's computation
    at 2 ranks is that one instead of the 1-rank run's."""
    one = {(r["model"], r["accumulation"]): r for r in measured if r["world_size"] == 1}
    records = []
    for r in measured:
        base = one[r["model"], r["accumulation"]]
        ddp_work = base["step_s"] - base["compute_s"]  # what DDP adds at one rank, where nothing is sent
        model = step_time(workload_from_scaling(base), r["world_size"], network)
        predicted = model.step
        if compute_at_2 is not None and r["world_size"] == 2:
            predicted = compute_at_2[r["model"], r["accumulation"]] + model.exposed_sync + ddp_work
        records.append(
            {
                "model": r["model"],
                "accumulation": r["accumulation"],
                "world_size": r["world_size"],
                "measured_step_s": r["step_s"],
                "predicted_step_s": predicted,
                "ratio": predicted / r["step_s"],
                # The same model with the computation measured at n ranks in place of the 1-rank one:
                # what is left of the miss is the sync term's.
                "ratio_given_compute": (r["compute_s"] + model.exposed_sync + ddp_work) / r["step_s"],
                "compute_1_s": base["compute_s"],
                "compute_n_s": r["compute_s"],
                "ddp_work_s": ddp_work,
                "modelled_sync_s": model.sync,
                "measured_sync_s": r["step_s"] - r["compute_s"] - ddp_work,
                "gradient_bytes": r["gradient_bytes"],
                # What each node's link sent per synced step (None over loopback, absent in older runs).
                **{k: r[k] for k in ("sent_bytes_per_sync_min", "sent_bytes_per_sync_max") if k in r},
                "alpha_s": network.alpha,
                "beta_s_per_byte": network.beta,
                "fit_relative_rms": fit_rms,
                **(
                    {"compute_fed_s": compute_at_2[r["model"], r["accumulation"]]}
                    if compute_at_2 and r["world_size"] == 2
                    else {}
                ),
            }
        )
    return records


def format_table(records: list[dict], machine: dict) -> str:
    first = records[0]
    fit = (
        f"medians of {first.get('repeats', 1)} runs; alpha {first['alpha_s'] * 1e6:.0f} us, "
        f"{1 / first['beta_s_per_byte'] / 1e9:.2f} GB/s "
        f"(fit to gloo at 2 ranks, RMS error {first['fit_relative_rms']:.0%})"
    )
    dialled = any("link" in r for r in records)
    if dialled:  # α and β differ link by link: each row's fit is on its own line below
        fit = f"medians of {first.get('repeats', 1)} runs; alpha and beta fitted to gloo at 2 ranks on each link"
    if any("compute_fed_s" in r for r in records):
        fit += "; the model's computation at 2 ranks from a run of its own (--compute-at-n)"
    lines = [
        machine_line(machine, fit),
        f"{'link':>8} "
        * dialled
        + f"{'model':>13} {'accum':>5} {'ranks':>5} {'measured':>9} {'predicted':>9} {'ratio':>6} "
        f"{'compute 1->n (ms)':>17} {'sync: DDP / a-b (ms)':>20} {'ratio, compute at n':>19} {'ratio range':>11}",
    ]
    for r in records:
        lines.append(
            f"{r.get('link', 'loopback'):>8} "
            * dialled
            + f"{r['model']:>13} {r['accumulation']:>5} {r['world_size']:>5} {r['measured_step_s'] * 1e3:>9.1f} "
            f"{r['predicted_step_s'] * 1e3:>9.1f} {r['ratio']:>6.2f} "
            f"{r['compute_1_s'] * 1e3:>8.1f} -> {r['compute_n_s'] * 1e3:>5.1f} "
            f"{r['measured_sync_s'] * 1e3:>11.1f} / {r['modelled_sync_s'] * 1e3:>5.1f} "
            f"{r['ratio_given_compute']:>19.2f} {r['ratio_range'][0]:>5.2f}-{r['ratio_range'][1]:.2f}"
        )
    if dialled:
        lines.append("alpha and beta, link by link (fit to gloo at 2 ranks: on 2 nodes, or on one over loopback):")
        for link in dict.fromkeys(r.get("link", "loopback") for r in records):
            r = next(x for x in records if x.get("link", "loopback") == link)
            lines.append(
                f"  {link}: alpha {r['alpha_s'] * 1e6:.0f} us, {8 / r['beta_s_per_byte'] / 1e6:.0f} Mbit/s "
                f"(RMS error {r['fit_relative_rms']:.0%})"
            )
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """Predicted against measured step time, one point per setting, with the line where they agree;
    over dialled links, the speedups instead (plot_links)."""
    from distdocs.figures import pyplot, to_svg

    if any("link" in r for r in records):
        return plot_links(records, machine)

    fig, ax = pyplot().subplots(figsize=(5.6, 4.6))
    top = max(max(r["measured_step_s"], r["predicted_step_s"]) for r in records) * 1e3 * 1.1
    ax.plot([0, top], [0, top], color="0.6", linestyle="--", label="predicted = measured")
    for (model, n), marker in zip(sorted({(r["model"], r["world_size"]) for r in records}), ["o", "s", "^", "D"]):
        mine = [r for r in records if (r["model"], r["world_size"]) == (model, n)]
        counts = ", ".join(str(r["accumulation"]) for r in mine)
        ax.plot(
            [r["measured_step_s"] * 1e3 for r in mine],
            [r["predicted_step_s"] * 1e3 for r in mine],
            marker,
            linestyle="none",
            label=f"{model}, {n} rank{'s' if n > 1 else ''} (accumulation {counts})",
        )
    ax.set(xlabel="measured DDP step (ms)", ylabel="predicted step (ms)", xlim=(0, top), ylim=(0, top))
    ax.set_title(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return to_svg(fig)


def speedups(records: list[dict]) -> list[dict]:
    """Per link, model and accumulation count: the measured and the predicted speedup of 2 ranks on 2
    nodes over 1 rank, in samples per second (2 x the 1-rank step time over the 2-rank one)."""
    rows = []
    for r in (r for r in records if r["world_size"] == 2):
        key = (r.get("link", "loopback"), r["model"], r["accumulation"])
        one = next(
            x
            for x in records
            if x["world_size"] == 1 and (x.get("link", "loopback"), x["model"], x["accumulation"]) == key
        )
        rows.append(
            {
                "link": key[0],
                "model": key[1],
                "accumulation": key[2],
                "measured": 2 * one["measured_step_s"] / r["measured_step_s"],
                "predicted": 2 * one["predicted_step_s"] / r["predicted_step_s"],
            }
        )
    return rows


def plot_links(records: list[dict], machine: dict) -> str:
    """The speedup of 2 nodes over 1 rank against the accumulation count, one colour per link: the
    measured points, and the cost model's prediction as a line."""
    from distdocs.figures import pyplot, to_svg

    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    rows = speedups(records)
    counts = sorted({r["accumulation"] for r in rows})
    ax.axhline(2, color="0.6", linestyle="--", linewidth=1, label="ideal: 2 ranks, twice the samples")
    ax.axhline(1, color="0.6", linestyle=":", linewidth=1, label="no faster than one rank")
    for link, colour in zip(dict.fromkeys(r["link"] for r in rows), ["C0", "C1", "C2", "C3"]):
        mine = sorted((r for r in rows if r["link"] == link), key=lambda r: r["accumulation"])
        name = "loopback, one machine" if link == "loopback" else f"{link} link between 2 nodes"
        for key, style in (("predicted", "-"), ("measured", "o")):
            ax.plot(
                [r["accumulation"] for r in mine], [r[key] for r in mine], style, color=colour, label=f"{name}: {key}"
            )
    ax.set(
        xscale="log",
        xticks=counts,
        xticklabels=[str(k) for k in counts],
        xlabel="micro-batches accumulated per step (k)",
        ylabel="speedup of 2 ranks over 1 (samples/s)",
        ylim=(0, 2.3),
    )
    ax.minorticks_off()
    ax.set_title(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return to_svg(fig)
