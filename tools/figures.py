"""Draw a figure of the site from its input, for measurements/saved-data.yml: read the saved data, the
page or the example the figure shows, and hand what it says to distdocs.figures, which draws.

    python -m tools.figures loss-curves measurements/lr-scaling-cpu.json docs/assets/lr-scaling-cpu.svg
    python -m tools.figures tensor-parallel examples/tensor_parallel/step01_by_hand.py OUT.svg
    python -m tools.figures sim-commands docs/operations/in-production.md OUT.svg

A page or an example is read here, not in distdocs: the sizes an example sets, the `distdocs sim`
lines a page shows, the output blocks of a page's runs.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys

from distdocs import arguments, figures
from distdocs.calculators import costmodel

SIM_TITLE = "the cost model over 1 to 8 ranks: speedup against ranks"


def tensor_parallel_sizes(source: str) -> tuple[int, int, int, int]:
    """What the tensor-parallel example's source sets: D_MODEL, D_HIDDEN, the batch of its input `x`,
    and NPROC_PER_NODE; figures.tensor_parallel's arguments, in its order."""

    def number(pattern: str) -> int:
        found = re.search(pattern, source, re.M)
        if not found:
            raise ValueError(f"the example sets no {pattern!r}")
        return int(found.group(1))

    return (
        number(r"^D_MODEL = (\d+)"),
        number(r"^D_HIDDEN = (\d+)"),
        number(r"^\s*x = torch\.randn\((\d+), D_MODEL"),
        number(r"^NPROC_PER_NODE = (\d+)"),
    )


def sim_command_steps(page: str) -> dict[str, list[costmodel.Step]]:
    """The steps of every `distdocs sim` command line in `page` (a Markdown page's text), computed by the
    same code as the command, named by network and accumulation: the tables a page shows."""
    parser = argparse.ArgumentParser(prog="distdocs sim")
    arguments.add_sim_arguments(parser)
    curves = {}
    for line in re.findall(r"^\s*distdocs sim (.*)$", page, re.M):
        args = parser.parse_args(shlex.split(line))
        work, network, _ = arguments.sim_inputs(args)
        sizes = [int(n) for n in args.world_sizes.split(",")]
        where = "2-core CPU, calibrated" if args.measured else network.name
        curves[f"{where}, accumulation {args.accumulation}"] = costmodel.predict_steps(
            work, sizes, network, args.algorithm
        )
    if not curves:
        raise ValueError("the page has no `distdocs sim` command line")
    return curves


def sharded_runs(page: str) -> dict[int, dict[tuple[str, int], list[int]]]:
    """The runs of the sharded example whose output blocks the sharded page (a Markdown page's text)
    shows: per world size, the bytes of parameters, gradients and Adam state that each (DDP or FSDP,
    rank) holds."""
    runs = {}
    for block in re.findall(r'```text title="Output"\n(.*?)```', page, re.S):
        rows = re.findall(r"^\s*(DDP|FSDP), rank (\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", block, re.M)
        if rows:
            runs[1 + max(int(r[1]) for r in rows)] = {(kind, int(rank)): list(map(int, b)) for kind, rank, *b in rows}
    if not runs:
        raise ValueError("the page shows no output of the sharded example")
    return runs


# name: (draw from the input file's text, what the input is)
FIGURES = {
    "loss-curves": (lambda text: figures.loss_curves(json.loads(text)), "DATA.json"),
    "tensor-parallel": (lambda text: figures.tensor_parallel(*tensor_parallel_sizes(text)), "EXAMPLE.py"),
    "profile-trace": (lambda text: figures.profile_trace(json.loads(text)), "TRACE.json"),
    "sim-commands": (lambda text: figures.speedup_curves(sim_command_steps(text), SIM_TITLE), "PAGE.md"),
    "pipeline-schedules": (lambda text: figures.pipeline_schedules(json.loads(text)), "DATA.json"),
    "pipeline-schedules-summary": (lambda text: figures.pipeline_schedules_summary(json.loads(text)), "DATA.json"),
    "sharded-bytes": (lambda text: figures.sharded_bytes(sharded_runs(text)), "PAGE.md"),
    "precision-layouts": (lambda text: figures.precision_layouts(), "src/distdocs/calculators/memory.py"),
}


def draw(name: str, text: str) -> str:
    """The SVG of figure `name`, drawn from its input file's text."""
    return FIGURES[name][0](text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in FIGURES:
        inputs = " | ".join(f"{name} {what}" for name, (_, what) in FIGURES.items())
        print(f"usage: python -m tools.figures {{{inputs}}} OUT.svg", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        svg = draw(argv[0], f.read())
    with open(argv[2], "w") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
