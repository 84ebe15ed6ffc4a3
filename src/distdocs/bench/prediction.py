"""The cost model against measurement: the DDP step time that distdocs.costmodel predicts at 1 and 2
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
import statistics

from distdocs.bench.allreduce import bench_allreduce
from distdocs.bench.harness import add_step_flags, machine_line
from distdocs.bench.scaling import MODELS, bench_scaling
from distdocs.cli import parse_list, require
from distdocs.costmodel import Network, fit_alpha_beta, step_time, workload_from_scaling

SWEEP_SIZES = [2**18, 2**20, 2**22, 2**24, 2**26]  # 256 KiB to 64 MiB, around the models' gradients


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_step_flags(parser)
    parser.add_argument(
        "--repeat", type=int, default=3, help="whole comparisons, each in fresh processes; medians kept (default: 3)"
    )


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    accumulation = parse_list(args.accumulation, int, "--accumulation")
    require(args.steps >= 1 and args.repeat >= 1, "--steps and --repeat must be positive")
    runs = []
    for i in range(args.repeat):
        if progress:
            progress(f"run {i + 1}/{args.repeat}: allreduce sweep at 2 ranks for alpha and beta, then DDP steps")
        sweep = bench_allreduce([2], SWEEP_SIZES, iters=10)
        fit = fit_alpha_beta(sweep, "gloo", world_size=2)
        runs.append(compare(bench_scaling([1, 2], accumulation, args.steps, MODELS), fit.network, fit.relative_rms))
    return merge_runs(runs)


def merge_runs(runs: list[list[dict]]) -> list[dict]:
    """Per setting, the median of every number over the runs, and the lowest and highest ratio: on a
    shared machine the spread between runs is part of the result."""
    merged = []
    for i, first in enumerate(runs[0]):
        same = [run[i] for run in runs]
        row = {k: (statistics.median(r[k] for r in same) if isinstance(v, float) else v) for k, v in first.items()}
        row["repeats"] = len(runs)
        row["ratio_range"] = [min(r["ratio"] for r in same), max(r["ratio"] for r in same)]
        merged.append(row)
    return merged


def compare(measured: list[dict], network: Network, fit_rms: float = 0.0) -> list[dict]:
    """Predicted and measured step time for every scaling record, with the terms split."""
    one = {(r["model"], r["accumulation"]): r for r in measured if r["world_size"] == 1}
    records = []
    for r in measured:
        base = one[r["model"], r["accumulation"]]
        ddp_work = base["step_s"] - base["compute_s"]  # what DDP adds at one rank, where nothing is sent
        model = step_time(workload_from_scaling(base), r["world_size"], network)
        predicted = model.step
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
                "alpha_s": network.alpha,
                "beta_s_per_byte": network.beta,
                "fit_relative_rms": fit_rms,
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
    lines = [
        machine_line(machine, fit),
        f"{'model':>13} {'accum':>5} {'ranks':>5} {'measured':>9} {'predicted':>9} {'ratio':>6} "
        f"{'compute 1->n (ms)':>17} {'sync: DDP / a-b (ms)':>20} {'ratio, compute at n':>19} {'ratio range':>11}",
    ]
    for r in records:
        lines.append(
            f"{r['model']:>13} {r['accumulation']:>5} {r['world_size']:>5} {r['measured_step_s'] * 1e3:>9.1f} "
            f"{r['predicted_step_s'] * 1e3:>9.1f} {r['ratio']:>6.2f} "
            f"{r['compute_1_s'] * 1e3:>8.1f} -> {r['compute_n_s'] * 1e3:>5.1f} "
            f"{r['measured_sync_s'] * 1e3:>11.1f} / {r['modelled_sync_s'] * 1e3:>5.1f} "
            f"{r['ratio_given_compute']:>19.2f} {r['ratio_range'][0]:>5.2f}-{r['ratio_range'][1]:.2f}"
        )
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """Predicted against measured step time, one point per setting, with the line where they agree."""
    from distdocs.figures import pyplot, to_svg

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
