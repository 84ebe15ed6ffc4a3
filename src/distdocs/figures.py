"""Figures drawn from the data they are given, as SVG text that depends only on the data: no date, and
ids from a fixed salt, so that the same data always draws the same file and a test can redraw it.
Nothing here reads a file: the benchmarks hand over their records, `distdocs sim` its steps, and
tools/figures.py (`python -m tools.figures NAME INPUT OUT.svg`) what it read from saved data, a page
or an example.
"""

from __future__ import annotations

import io


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
    ax.set_yticks(sizes, [f"{n}×" for n in sizes])
    ax.minorticks_off()
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return to_svg(fig)


RANK_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


def tensor_parallel(d_model: int, d_hidden: int, batch: int, world: int) -> str:
    """The Megatron MLP block z = gelu(x A) B on `world` ranks, drawn to scale: A split by columns and B
    by the matching rows, with the slices the tensor-parallel example takes
    (`slice(r * d_hidden // n, (r + 1) * d_hidden // n)`), each rank's part in its own colour."""
    from matplotlib.patches import Rectangle

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.4, 3.6))
    cols = [(r * d_hidden // world, (r + 1) * d_hidden // world) for r in range(world)]
    gap, x0, top = d_model / 2, 0.0, 0.0

    def matrix(rows: int, width: int, parts: list[tuple[str, float, float, float, float]], label: str) -> None:
        """A rows x width matrix at x0, hanging from the top line; parts are (colour, x, y, w, h)."""
        nonlocal x0
        ax.add_patch(Rectangle((x0, top - rows), width, rows, fill=False, linewidth=1.2))
        for colour, px, py, pw, ph in parts:
            ax.add_patch(Rectangle((x0 + px, top - py - ph), pw, ph, color=colour, alpha=0.85))
        ax.text(x0 + width / 2, top - rows - d_model / 6, label, ha="center", va="top", fontsize=8)
        x0 += width + gap

    def sign(text: str) -> None:
        nonlocal x0
        ax.text(x0 - gap / 2, top - batch / 2, text, ha="center", va="center", fontsize=12)

    grey = "#bbbbbb"
    matrix(batch, d_model, [(grey, 0, 0, d_model, batch)], f"x: {batch}×{d_model}\non every rank")
    sign("·")
    matrix(d_model, d_hidden, [(RANK_COLOURS[r], a, 0, b - a, d_model) for r, (a, b) in enumerate(cols)],
           f"A: {d_model}×{d_hidden}\ncolumns split")  # fmt: skip
    sign("→")
    matrix(batch, d_hidden, [(RANK_COLOURS[r], a, 0, b - a, batch) for r, (a, b) in enumerate(cols)],
           "gelu(x A_i)\nno communication")  # fmt: skip
    sign("·")
    matrix(d_hidden, d_model, [(RANK_COLOURS[r], 0, a, d_model, b - a) for r, (a, b) in enumerate(cols)],
           f"B: {d_hidden}×{d_model}\nrows split")  # fmt: skip
    sign("→")
    step = batch * 1.5
    for r in range(world):
        ax.add_patch(Rectangle((x0, top - r * step - batch), d_model, batch, color=RANK_COLOURS[r], alpha=0.85))
    ax.text(x0 + d_model / 2, top - (world - 1) * step - batch - d_model / 6, "z_i: each rank's\npartial sum",
            ha="center", va="top", fontsize=8)  # fmt: skip
    x0 += d_model + gap
    sign("→")
    matrix(batch, d_model, [(grey, 0, 0, d_model, batch)], "z = Σ z_i\none all_reduce")
    handles = [Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r], alpha=0.85) for r in range(world)]
    ax.legend(handles, [f"rank {r}" for r in range(world)], fontsize=8, loc="lower right", frameon=False)
    ax.set_xlim(-gap, x0 + gap / 2)
    ax.set_ylim(-max(d_hidden, d_model) - d_model, batch)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return to_svg(fig)


def trace_timeline(trace: dict) -> dict:
    """From a Chrome trace that torch.profiler wrote: its steps, the stretches in which the main thread
    ran operators (top-level ones, merged), the gaps between them, and the collectives on the
    backend's threads; in ms from the first step's start."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep")), key=lambda e: e["ts"])
    if not steps:
        raise ValueError("the trace holds no ProfilerStep: profile with a schedule and call prof.step()")
    main, t0 = steps[0]["tid"], steps[0]["ts"]
    busy: list[list[float]] = []
    for e in sorted((e for e in events if e["tid"] == main and e.get("cat") == "cpu_op"), key=lambda e: e["ts"]):
        start, end = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
        if busy and start <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], end)
        else:
            busy.append([start, end])
    spans = [[(s["ts"] - t0) / 1e3, (s["ts"] + s["dur"] - t0) / 1e3] for s in steps]
    gaps = []
    for a, b in spans:
        inside = [[max(x, a), min(y, b)] for x, y in busy if y > a and x < b]
        edges = [a] + [v for x, y in inside for v in (x, y)] + [b]
        gaps += [[x, y] for x, y in zip(edges[::2], edges[1::2]) if y > x]
    comm = [
        [(e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3]
        for e in events
        if e["name"].startswith(("gloo:", "nccl:")) and e["tid"] != main
    ]
    return {"steps": spans, "busy": busy, "gaps": gaps, "comm": sorted(comm)}


def covered(span: list[float], others: list[list[float]]) -> float:
    """The share of `span` that the union of `others` covers."""
    cuts, end, total = sorted((max(a, span[0]), min(b, span[1])) for a, b in others), span[0], 0.0
    for a, b in cuts:
        if b > max(a, end):
            total += b - max(a, end)
            end = b
    return total / (span[1] - span[0])


def profile_trace(trace: dict) -> str:
    """The main thread of one rank over the profiled steps: where it ran operators, where it waited
    (gaps of 2% of a step or more, in red), and the all_reduces on the backend's threads beneath."""
    from matplotlib.patches import Patch

    t = trace_timeline(trace)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 2.6))
    ax.broken_barh([(a, b - a) for a, b in t["busy"]], (0.6, 0.8), facecolors="#4c72b0")
    step_ms = max(b - a for a, b in t["steps"])
    gaps = [(a, b) for a, b in t["gaps"] if b - a >= 0.02 * step_ms]
    ax.broken_barh([(a, b - a) for a, b in gaps], (0.6, 0.8), facecolors="none", edgecolors="#c44e52", hatch="///")
    ax.broken_barh([(a, b - a) for a, b in t["comm"]], (-0.4, 0.8), facecolors="#dd8452")
    for a, _ in t["steps"][1:]:
        ax.axvline(a, color="0.5", linestyle="--", linewidth=0.8)
    widest = max(gaps, key=lambda g: g[1] - g[0])
    during = covered(widest, t["comm"]) >= 0.8  # a collective runs through (most of) the gap
    ax.annotate(
        f"{widest[1] - widest[0]:.1f} ms " + ("waiting for the all_reduce" if during else "with no operator"),
        ((widest[0] + widest[1]) / 2, 1.4),
        xytext=(0, 10),
        textcoords="offset points",
        ha="center",
        fontsize=8,
        color="#c44e52",
    )
    ax.set_yticks([0, 1], ["gloo's threads:\nall_reduce", "main thread:\noperators"])
    ax.set_ylim(-0.6, 2.0)
    ax.set_xlim(t["steps"][0][0], t["steps"][-1][1])
    ax.set_xlabel(f"ms, {len(t['steps'])} profiled steps of rank 0 (dashed: where each step starts)")
    ax.legend(
        handles=[Patch(facecolor="none", edgecolor="#c44e52", hatch="///", label="gap: the thread waits")],
        fontsize=8,
        loc="upper right",
        frameon=False,
    )
    fig.tight_layout()
    return to_svg(fig)


def pipeline_schedules(data: dict) -> str:
    """The last step of each schedule in `data["schedules"]` (saved by
    examples/pipeline_parallel/step03_schedules.py --save): a row per rank, a bar for each forward (F),
    backward (B), input-gradient (I) and weight-gradient (W) computation, labelled stage:micro-batch;
    the gaps are idle."""
    colours = {"F": "#4c72b0", "B": "#dd8452", "I": "#dd8452", "W": "#55a868"}
    plt = pyplot()
    shown = data["schedules"]
    fig, axes = plt.subplots(len(shown), 1, figsize=(7.2, 0.5 + 1.05 * len(shown)), squeeze=False)
    longest = max(span[1] for s in shown.values() for r in s["ranks"] for span in r["spans"]) * 1e3
    for ax, (name, s) in zip(axes[:, 0], shown.items()):
        for rank, r in enumerate(s["ranks"]):
            for start, end, kind, stage, chunk in r["spans"]:
                a, b = start * 1e3, end * 1e3
                ax.broken_barh([(a, b - a)], (rank - 0.4, 0.8), facecolors=colours[kind], edgecolor="white")
                if b - a > longest / 45:
                    ax.text(
                        (a + b) / 2,
                        rank,
                        f"{kind}{stage}:{chunk}",
                        ha="center",
                        va="center",
                        fontsize=5.5,
                        color="white",
                    )
        ranks = len(s["ranks"])
        ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, longest)
        ax.tick_params(axis="x", labelsize=7)
        idle = ", ".join(f"{r['idle']:.0%}" for r in s["ranks"])
        ax.set_title(
            f"{name}, {s['stages']} stage{'s' if s['stages'] > 1 else ''} a rank: bubble formula {s['formula']:.0%}, "
            f"idle measured {idle}",
            fontsize=8,
            loc="left",
        )
    axes[-1, 0].set_xlabel(
        "ms from the start of the step; F forward, B backward, I and W its input and weight halves; "
        "label stage:micro-batch",
        fontsize=7,
    )
    m, c = data["machine"], data["config"]
    fig.suptitle(
        f"{c['microbatches']} micro-batches, {c['layers']} layers of width {c['width']}; {m['ranks']} ranks, "
        f"{m['machine']}, {m['cores']} cores, torch {m['torch']}, {m['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    return to_svg(fig)


def pipeline_schedules_summary(data: dict) -> str:
    """What each schedule in `data["schedules"]` cost, side by side: the share of the step each rank
    was idle against the bubble formula, the micro-batches in flight at each rank's peak, and the
    activations sent in a step."""
    plt = pyplot()
    shown = data["schedules"]
    names = list(shown)
    rows = range(len(names))
    fig, (idle, peak, sends) = plt.subplots(1, 3, figsize=(7.2, 0.6 + 0.42 * len(names)), sharey=True)
    height = 0.38
    for rank, colour in enumerate(("#4c72b0", "#dd8452")):
        offset = (rank - 0.5) * height
        idle.barh([r + offset for r in rows], [100 * shown[n]["ranks"][rank]["idle"] for n in names], height,
                  color=colour, label=f"rank {rank}")  # fmt: skip
        peak.barh([r + offset for r in rows], [s["ranks"][rank]["peak"] / s["stages"] for s in shown.values()],
                  height, color=colour)  # fmt: skip
    idle.scatter([100 * shown[n]["formula"] for n in names], rows, marker="|", s=220, color="black", zorder=3,
                 label="bubble formula")  # fmt: skip
    sends.barh(rows, [sum(r["sends"] for r in shown[n]["ranks"]) for n in names], 0.6, color="#55a868")
    idle.set_yticks(rows, names, fontsize=7)
    idle.invert_yaxis()
    for ax, title in ((idle, "idle, % of the step"), (peak, "micro-batches in flight, peak"),
                      (sends, "activations sent a step")):  # fmt: skip
        ax.set_title(title, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    m, c = data["machine"], data["config"]
    fig.suptitle(
        f"{c['microbatches']} micro-batches, {c['layers']} layers of width {c['width']}; {m['ranks']} ranks, "
        f"{m['machine']}, {m['cores']} cores, torch {m['torch']}, {m['date']}",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(*idle.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7, frameon=False)
    return to_svg(fig)


def stacked_bytes(
    rows: dict[str, dict[str, int]], colours: dict[str, str], xlabel: str, total: dict[str, str], unit: int = 1
) -> str:
    """One horizontal bar per row, stacked from its named parts (drawn in `unit`s of bytes), each part
    labelled with its value where it fits and the row's `total` text at the end of the bar."""
    plt = pyplot()
    legend_rows = -(-len(colours) // 3)
    height = 0.7 + 0.55 * len(rows) + 0.2 * legend_rows
    fig, ax = plt.subplots(figsize=(7.2, height))
    longest = max(sum(parts.values()) for parts in rows.values()) / unit
    for row, (name, parts) in enumerate(rows.items()):
        left = 0
        for part, value in parts.items():
            if value:
                ax.barh(row, value / unit, left=left, color=colours[part], edgecolor="white", label=part)
                if value / unit >= longest / 16:
                    ax.text(left + value / unit / 2, row, f"{value / unit:,.0f}", ha="center", va="center",
                            fontsize=7, color="white")  # fmt: skip
            left += value / unit
        ax.text(left + longest / 80, row, total[name], va="center", fontsize=8, fontweight="bold")
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.35)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = dict(zip(*reversed(ax.get_legend_handles_labels())))
    shown = [part for part in colours if part in handles]
    fig.tight_layout(rect=(0, 0.22 * legend_rows / height, 1, 1))
    fig.legend([handles[p] for p in shown], shown, loc="lower center", ncol=3, fontsize=7, frameon=False)
    return to_svg(fig)


# The choosing page's precision layouts, in its order and words: distdocs.calculators.memory.LAYOUTS names.
PAGE_LAYOUTS = {
    "autocast": "fp32, or torch.autocast",
    "bf16-master": "16-bit weights and gradients,\nfp32 master: the ZeRO paper",
    "bf16-fp32-grads": "bf16 weights, fp32 gradients\nand master: Megatron-LM",
    "bf16-master-fp32-grads": "16-bit weights and gradients,\nfp32 gradients and master:\nDeepSpeed's estimators",
}
# distdocs.calculators.memory's parts, as the page names them.
STATE_NAMES = {
    "weights": "weights",
    "gradients": "gradients, in the weights' type",
    "fp32 gradients": "fp32 gradients",
    "master weights": "fp32 master weights",
    "optimizer": "Adam's m and v",
}
STATE_COLOURS = dict(zip(STATE_NAMES.values(), ("#4c72b0", "#dd8452", "#c44e52", "#55a868", "#8172b3")))


def precision_layouts() -> str:
    """Bytes of model state per parameter, with Adam, in each of the choosing page's precision layouts,
    split into their parts, from `distdocs.calculators.memory.bytes_per_parameter`."""
    from distdocs.calculators import memory

    rows, total = {}, {}
    for layout, name in PAGE_LAYOUTS.items():
        states = memory.bytes_per_parameter(layout, "adam").parts()
        parts = {STATE_NAMES[part]: value for part, value in states.items()}
        rows[name], total[name] = parts, f"{sum(parts.values())} bytes"
    return stacked_bytes(rows, STATE_COLOURS, "bytes per parameter, with Adam", total)


SHARD_COLOURS = {"parameters": "#4c72b0", "gradients": "#dd8452", "Adam state": "#8172b3"}


def sharded_bytes(runs: dict[int, dict[tuple[str, int], list[int]]]) -> str:
    """The bytes each rank holds under DDP and under FSDP in the sharded example's runs (per world size,
    the parameters', gradients' and Adam state's bytes of each (DDP or FSDP, rank)): one row for DDP,
    one for FSDP at each world size."""
    ddp = next(iter(runs.values()))[("DDP", 0)]
    rows, total = {"DDP, every rank": dict(zip(SHARD_COLOURS, ddp))}, {"DDP, every rank": f"{sum(ddp):,} bytes"}
    for n, held in sorted(runs.items()):
        fsdp = held[("FSDP", 0)]
        if any(held[("FSDP", r)] != fsdp or held[("DDP", r)] != ddp for r in range(n)):
            raise ValueError(f"the ranks of the run at {n} hold different bytes: one row cannot show them")
        name = f"FSDP, each of {n} ranks"
        rows[name], total[name] = dict(zip(SHARD_COLOURS, fsdp)), f"{sum(fsdp):,} bytes: 1/{n}"
    return stacked_bytes(rows, SHARD_COLOURS, "kB each rank holds between steps (1 kB = 1,000 bytes)", total, 1000)
