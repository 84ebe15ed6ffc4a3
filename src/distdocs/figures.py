"""Figures drawn from saved data, as SVG text that depends only on the data: no date, and ids from a
fixed salt, so that the same data always draws the same file and a test can redraw it.

    python -m distdocs.figures loss-curves benchmarks/lr-scaling-cpu.json docs/assets/lr-scaling-cpu.svg
"""

from __future__ import annotations

import io
import json
import sys


def pyplot():
    """matplotlib's pyplot, set up for reproducible SVG."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "distdocs"
    return plt


def to_svg(fig) -> str:
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": "distdocs"})
    pyplot().close(fig)
    return out.getvalue()


def loss_curves(data: dict) -> str:
    """The loss after each epoch for every run in `data["curves"]` (saved by an example's --save),
    on a log scale; a run that diverged (loss 1 or more) stops where it did."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (name, curve), style in zip(data["curves"].items(), ["o-", "s--", "^-", "x:"]):
        shown = [(epoch, loss) for epoch, loss in enumerate(curve, 1) if loss < 1.0]
        ax.plot([e for e, _ in shown], [loss for _, loss in shown], style, label=name)
    ax.set(
        xlabel="epoch (the same samples for every run)",
        ylabel="loss on the whole dataset",
        yscale="log",
        xticks=range(1, 1 + max(len(c) for c in data["curves"].values())),
    )
    m = data["machine"]
    ax.set_title(f"{m['ranks']} ranks, {m['machine']}, {m['cores']} cores, torch {m['torch']}, {m['date']}", fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return to_svg(fig)


def speedup_curves(curves: dict[str, list], title: str, measured: dict[str, list] | None = None) -> str:
    """Speedup against ranks for each named list of `costmodel.Step`s, with the ideal line, and a
    mark where each curve turns sync-bound (exposed sync exceeds compute); `measured` adds points
    as (ranks, speedup) pairs."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    sizes = sorted({s.world_size for steps in curves.values() for s in steps})
    ax.plot(sizes, sizes, color="0.6", linestyle="--", label="ideal: n ranks, n times the samples")
    for (name, steps), style in zip(curves.items(), ["o-", "s-", "^-", "x-"]):
        (line,) = ax.plot([s.world_size for s in steps], [s.speedup for s in steps], style, label=f"{name} (model)")
        bound = [s for s in steps if s.exposed_sync > s.compute]
        if bound:
            ax.axvline(bound[0].world_size, color=line.get_color(), linestyle=":", linewidth=1)
            ax.annotate(
                "sync-bound from here",
                (bound[0].world_size, bound[0].speedup),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
                color=line.get_color(),
            )
    for (name, points), marker in zip((measured or {}).items(), ["D", "v", "P", "*"]):
        ax.plot([n for n, _ in points], [s for _, s in points], marker, linestyle="none", label=f"{name} (measured)")
    ax.set(
        xlabel="ranks (data-parallel workers)", ylabel="speedup in samples/s over 1 rank", xscale="log", yscale="log"
    )
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return to_svg(fig)


FIGURES = {"loss-curves": loss_curves}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in FIGURES:
        print(f"usage: python -m distdocs.figures {{{','.join(FIGURES)}}} DATA.json OUT.svg", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        svg = FIGURES[argv[0]](json.load(f))
    with open(argv[2], "w") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
