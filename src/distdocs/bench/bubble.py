"""The pipeline bubble on emulated accelerators (distdocs.lab.emulated_pipeline): GPipe and 1F1B at 2 and 4
stages and 1 to 8 micro-batches, each stage's idle share of the step, measured from its own timestamps,
next to (p-1)/(m+p-1).

Each stage's forward of a micro-batch waits 20 ms and its backward 40 ms; the activations (64 KiB) and
their gradients cross a link paced by the ranks at 1 Gbit/s, half a millisecond a message. The formula
counts the fill and the drain and nothing else; what the messages and the host add to it shows as the
difference. One world of 4 ranks runs every point; 2 stages are its first two ranks.
"""

from __future__ import annotations

import argparse
import statistics

from distdocs.arguments import parse_list, parse_rate, require
from distdocs.bench.harness import machine_line, table
from distdocs.lab.emulated_pipeline import SCHEDULES, pipeline_idle
from distdocs.lab.world import World

FORWARD_S, BACKWARD_S, ACTIVATION_BYTES, LINK = 0.020, 0.040, 64 * 1024, "1gbit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stages", default="2,4", help="comma-separated, 2 to 8 (default: 2,4)")
    parser.add_argument("--microbatches", default="1,2,4,8", help="comma-separated (default: 1,2,4,8)")
    parser.add_argument("--schedules", default="gpipe,1f1b", help="gpipe, 1f1b or both (default: both)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per point (default: 2)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    stages = parse_list(args.stages, int, "--stages", minimum=2)
    counts = parse_list(args.microbatches, int, "--microbatches", minimum=1)
    names = [s.strip() for s in args.schedules.split(",")]
    require(max(stages) <= 8 and args.steps >= 1, "--stages must be 2 to 8, --steps positive")
    require(all(n in SCHEDULES for n in names), f"--schedules: {', '.join(SCHEDULES)}")
    parse_rate(LINK)
    points = [(p, m, name) for name in names for p in stages for m in counts]
    with World(max(stages), timeout_s=600) as world:
        found = world.run(pipeline_idle, points, LINK, FORWARD_S, BACKWARD_S, ACTIVATION_BYTES, args.steps)[0]
    for r in found:
        r["idle_median"] = [statistics.median(stage) for stage in zip(*r["idle"])]
    return found


def format_table(records: list[dict], machine: dict) -> str:
    first = records[0]
    setup = (
        f"pipeline stages as emulated accelerators: a micro-batch's forward {first['forward_s'] * 1e3:g} ms, "
        f"backward {first['backward_s'] * 1e3:g} ms; {first['activation_bytes'] // 1024} KiB activations over "
        f"{first['link']} paced by the ranks; idle = 1 - a stage's compute / the step, median of the steps"
    )
    columns = [("schedule", 8), ("stages", 6), ("micro-batches", 13), ("bubble", 6), ("idle, each stage", 24)]
    rows = [
        [
            r["schedule"],
            str(r["stages"]),
            str(r["microbatches"]),
            f"{r['bubble']:.2f}",
            " ".join(f"{v:.2f}" for v in r["idle_median"]),
        ]
        for r in records
    ]
    return table(machine_line(machine, setup), columns, rows)


def plot(records: list[dict], machine: dict) -> str:
    """Each stage's idle share against the micro-batches, one panel per schedule: the formula's line
    for each number of stages, and the stages' measured shares as points."""
    from distdocs.figures import pyplot, to_svg

    names = sorted({r["schedule"] for r in records}, key=SCHEDULES.index)
    fig, axes = pyplot().subplots(1, len(names), figsize=(7.2, 3.4), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        mine = [r for r in records if r["schedule"] == name]
        for p, color in zip(sorted({r["stages"] for r in mine}), ("#4c72b0", "#dd8452", "#55a868", "#c44e52")):
            line = sorted((r for r in mine if r["stages"] == p), key=lambda r: r["microbatches"])
            ms = [r["microbatches"] for r in line]
            ax.plot(ms, [r["bubble"] for r in line], color=color, label=f"{p} stages: (p-1)/(m+p-1)")
            for r in line:
                ax.plot([r["microbatches"]] * p, r["idle_median"], "o", color=color, fillstyle="none")
        ax.set(title={"gpipe": "GPipe", "1f1b": "1F1B"}[name], xlabel="micro-batches m")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_ylim(0, 1)
    axes[0, 0].set_ylabel("idle share of the step, each stage (circles)")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    fig.tight_layout()
    return to_svg(fig)
