"""The scale model: 1 to 8 emulated accelerators (distdocs.lab.emulated) in torch's DDP, one per node of a
dialled network (distdocs.lab.links), each point beside the cost model's prediction.

Compute is a wait; the bytes, the collectives, the overlap and the link are real. One network of 8
nodes is built once, one world of 8 ranks runs on it, and smaller sizes are subgroups of it that DDP
takes as its process group. At each link rate, α and β are fitted first, on the same links (gloo's
all_reduce of 4 bytes and of 1 MiB, at 2 and 8 workers), and the cost model (`costmodel.step_time`) predicts
every point from them and the workload: S, T, k and DDP's buckets.

With no workload flags it measures the live subset: the production case (below) at 1, 2, 4 and 8
workers with 1 and 4 micro-batches per step, and at 2 and 8 micro-batches where the global batch
is held at 8; and a compute-bound model. `--sweep` measures what the pages draw: three link rates,
up to 16 micro-batches, DDP's bucket_cap_mb, and the same 8 workers on 2 nodes of 4, whose loopback is
dialled to 10 times the link between the nodes (`distdocs.lab.links.Network(inside=...)`).

The production case is ResNet-50 trained on V100s in FP32 over 1 Gbit/s Ethernet, one GPU per node:
367 images/s at 112 per GPU (NVIDIA's DeepLearningExamples, ResNet50 v1.5 for PyTorch, DGX-1 16GB,
pytorch-21.03), so 305 ms a step, and 25,557,032 parameters (torchvision's resnet50), 102.2 MB of
fp32 gradients. Scaled: the gradient to 2 MiB (1/48.7), the link to 100 Mbit/s (1/10), so that time
stretches by 10/48.7, a step's compute to 62.6 ms. Compute against sync, and with it every speedup,
is the same at both scales.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from dataclasses import asdict, replace

from distdocs import costmodel
from distdocs.arguments import UsageError, parse_list, require
from distdocs.lab import links
from distdocs.lab.emulated import Point, allreduce_timings, measure
from distdocs.lab.world import World, forked_cpu_seconds

MiB = 2**20
# The production case, scaled (see the docstring): the real job and its scale model.
RESNET50 = {"params": 25_557_032, "step_s": 112 / 367, "link": "1gbit", "gpu": "V100 16GB, FP32, batch 112"}
GRADIENT_SCALE = RESNET50["params"] * 4 / (2 * MiB)  # 48.7
LINK_SCALE = 10
PRODUCTION = {"gradient_bytes": 2 * MiB, "compute_s": round(RESNET50["step_s"] * LINK_SCALE / GRADIENT_SCALE, 4)}
COMPUTE_BOUND = {"gradient_bytes": 32 * 1024, "compute_s": 0.4}
LIVE_LINK = "100mbit"
SWEEP_LINKS = ("50mbit", "100mbit", "200mbit")
# bucket_cap_mb on a model whose backward is about as long as its sync at 8 workers: too small a bucket
# pays α per bucket, too large a one starts its allreduce late.
BUCKETS = {"gradient_bytes": 2 * MiB, "compute_s": 0.4, "layers": 64}
BUCKET_CAPS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
# α from a 4-byte all_reduce, whose time is all latency; β from 1 MiB, DDP's first bucket. Messages in
# between are distorted by tbf's bucket (distdocs.lab.links.burst_bytes), which lets the first 64 KiB
# after a pause through at once: they would pass for faster links with slower messages.
FIT_SIZES = (4, MiB)
FIT_WORKERS = (2, 8)
GLOO_LANES = 2  # ProcessGroupGloo's worker threads: DDP's bucket allreduces run two at a time
# Two levels: 2 nodes of 4 workers, the link inside a node (its loopback) 10 times the one between, as
# NVLink is many times a node's network card; at the live link, with 1 and 4 micro-batches.
NODES, PER_NODE, INSIDE_LINK = 2, 4, "1gbit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", help="comma-separated worker counts, up to 8 (default: 1,2,4,8)")
    parser.add_argument("--accumulation", help="micro-batches per step, comma-separated (default: 1,4)")
    parser.add_argument("--link", help=f"link rates, comma-separated, as in 100mbit (default: {LIVE_LINK})")
    parser.add_argument("--gradient-mb", type=float, help="gradient size in MiB (default: the production case's, 2)")
    parser.add_argument(
        "--compute-ms", type=float, help="one micro-batch's forward and backward in ms (default: the production case's)"
    )
    parser.add_argument("--bucket-mb", help="DDP bucket_cap_mb values, comma-separated (default: DDP's own)")
    parser.add_argument("--layers", type=int, default=8, help="layers the gradient is split into (default: 8)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per point (default: 3)")
    parser.add_argument("--sweep", action="store_true", help="the saved sweep: three link rates, k up to 16, buckets")


def live_points() -> list[Point]:
    """The live subset, at one link rate."""
    # Two workers at one micro-batch are also timed under no_sync(): the debugging guide's split.
    grid = [Point(n, k, **PRODUCTION, case="production", split=(n, k) == (2, 1)) for k in (1, 4) for n in (1, 2, 4, 8)]
    # The global batch held at 8 micro-batches (8 workers x 1, 4 x 2, 2 x 4, 1 x 8), and 1 worker at 2.
    held = [Point(n, k, **PRODUCTION, case="production") for n, k in ((4, 2), (1, 2), (1, 8))]
    compute = [Point(n, 1, **COMPUTE_BOUND, case="compute-bound") for n in (1, 2, 4, 8)]
    return grid + held + compute


def sweep_points(link: str) -> list[Point]:
    """The saved sweep's points at one link rate: the production case at k = 1, 4, 16, and at 100
    Mbit/s the live subset's other points and the bucket sweep."""
    live = link == LIVE_LINK
    points = [
        Point(n, k, **PRODUCTION, case="production", split=live and (n, k) == (2, 1))
        for k in (1, 4, 16)
        for n in (1, 2, 4, 8)
    ]
    if live:
        points += [p for p in live_points() if p not in points]
        points += [Point(8, 1, **BUCKETS, bucket_mb=cap, case="buckets") for cap in (*BUCKET_CAPS, None)]
    return points


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    custom = any(getattr(args, f) is not None for f in ("workers", "accumulation", "gradient_mb", "compute_ms"))
    require(not (args.sweep and (custom or args.link)), "--sweep takes no workload or link flags")
    require(1 <= args.layers <= 256 and args.steps >= 1, "--layers must be 1 to 256, --steps positive")
    rates = [r.strip() for r in (args.link or LIVE_LINK).split(",")] if not args.sweep else list(SWEEP_LINKS)
    for rate in rates:
        try:
            links.rate_bits(rate)
        except ValueError as e:
            raise UsageError(f"--link: {e}") from None
    try:
        links.check_can_build()
    except links.LinkError as e:
        raise UsageError(str(e)) from None
    if args.sweep:
        return run({rate: sweep_points(rate) for rate in rates}, args.steps, progress, two_level=True)
    elif custom or args.bucket_mb:
        workers = parse_list(args.workers or "1,2,4,8", int, "--workers", minimum=1)
        require(max(workers) <= 8 and 1 in workers, "--workers: 8 at most, and 1 among them (the baseline)")
        ks = parse_list(args.accumulation or "1,4", int, "--accumulation", minimum=1)
        caps = parse_list(args.bucket_mb, float, "--bucket-mb", minimum=1e-3) if args.bucket_mb else [None]
        gradient = round((args.gradient_mb if args.gradient_mb is not None else 2) * MiB)
        compute = args.compute_ms / 1e3 if args.compute_ms is not None else PRODUCTION["compute_s"]
        require(gradient >= 4 * args.layers and compute > 0, "--gradient-mb and --compute-ms must be positive")
        gradient -= gradient % (4 * args.layers)  # whole float32 parameters, the same size in every layer
        # The production case's workload, unless the flags change it
        same = args.gradient_mb is None and args.compute_ms is None and args.layers == 8
        case = "production" if same else "custom"
        points = [Point(1, k, gradient, compute, args.layers, cap, case=case) for cap in caps for k in ks]
        points = [replace(p, workers=n) for p in points for n in workers]
        by_link = {rate: points for rate in rates}
    else:
        by_link = {rate: live_points() for rate in rates}
    return run(by_link, args.steps, progress)


def run(by_link: dict[str, list[Point]], steps: int = 3, progress=None, two_level: bool = False) -> list[dict]:
    """Measure every point at its link rate, on one network and one world; return the records, each
    with its prediction and its speedup over 1 worker. With `two_level`, then the production case at
    8 workers on NODES nodes of PER_NODE, at the live link rate (or the first, without it)."""
    size = max(max(p.workers for p in points) for points in by_link.values())
    size = max(size, *FIT_WORKERS)
    records, fits = [], {}
    start, cpu = time.monotonic(), _cpu_seconds()
    with links.Network(size, next(iter(by_link))) as net:
        with World(size, timeout_s=900, namespaces=[n.namespace for n in net.nodes]) as world:
            for rate, points in by_link.items():
                net.set_rate(rate)
                if progress:
                    progress(f"{rate}: fitting α and β, then {len(points)} points")
                timings = world.run(allreduce_timings, list(FIT_SIZES), list(FIT_WORKERS))[0]
                fit = costmodel.fit_alpha_beta(timings)
                fit = replace(fit, network=replace(fit.network, concurrent=GLOO_LANES))
                for found in world.run(measure, points, steps)[0]:
                    records.append(_record(found, rate, fit))
                fits[rate] = fit
    if two_level:
        rate = LIVE_LINK if LIVE_LINK in by_link else next(iter(by_link))
        if progress:
            progress(f"{NODES} nodes of {PER_NODE} workers: {rate} between, {INSIDE_LINK} inside")
        records += measure_two_level(rate, fits[rate], steps)
    cost = {"run_wall_s": time.monotonic() - start, "run_cpu_s": _cpu_seconds() - cpu}
    return with_speedups([{**r, **cost} for r in records])


def measure_two_level(rate: str, between: costmodel.Fit, steps: int) -> list[dict]:
    """The production case at NODES x PER_NODE workers, with 1 and 4 micro-batches: DDP's one flat
    ring over all of them, numbered node by node. α and β inside a node are fitted on its loopback
    (the first node's 2 and 4 workers); between the nodes, `between` (the same link, fitted with one
    worker per node). The model prices each step of the flat ring at its slowest link."""
    size = NODES * PER_NODE
    points = [Point(size, k, **PRODUCTION, case="two-level") for k in (1, 4)]
    with links.Network(NODES, rate, inside=INSIDE_LINK) as net:
        places = [node.namespace for node in net.nodes for _ in range(PER_NODE)]
        with World(size, timeout_s=900, namespaces=places) as world:
            timings = world.run(allreduce_timings, list(FIT_SIZES), [2, PER_NODE])[0]
            inside = costmodel.fit_alpha_beta(timings)
            inside = replace(inside, network=replace(inside.network, concurrent=GLOO_LANES))
            found = world.run(measure, points, steps)[0]
    return [_record(f, rate, between, inside=(inside, INSIDE_LINK)) for f in found]


def _cpu_seconds() -> float:
    """CPU time of this process, of its children that have ended, and of the forkserver and the world's
    ranks it forked, once they have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu_seconds()


def _record(found: dict, link: str, fit: costmodel.Fit, inside: tuple[costmodel.Fit, str] | None = None) -> dict:
    """One point's record: `fit` is the link between the nodes; with `inside` (its fit and rate), the
    workers fill nodes of PER_NODE."""
    point = Point(**{k: found[k] for k in asdict(Point(1, 1, 4, 1.0))})
    per_node, inside_net = (PER_NODE, inside[0].network) if inside else (1, None)
    predicted = costmodel.step_time(point.workload(), point.workers, fit.network, "ring", per_node, inside_net)
    steps = found["steps_s"]
    record = {
        "case": point.case,
        "workers": point.workers,
        "nodes": point.workers // per_node,
        "link": link,
        "accumulation": point.accumulation,
        "gradient_bytes": point.gradient_bytes,
        "compute_ms": point.compute_s * 1e3,
        "layers": point.layers,
        "bucket_mb": point.bucket_mb,
        "backward_share": point.backward_share,
        "measured_s": statistics.median(steps),
        "best_s": min(steps),
        "steps_s": steps,
        "compute_s": statistics.median(found["compute_steps_s"]) if point.split else None,
        "ddp_bucket_bytes": found["ddp_bucket_bytes"],
        "model_bucket_bytes": costmodel.ddp_buckets(
            point.gradient_bytes,
            **{k: getattr(point.workload(), k) for k in ("bucket_bytes", "first_bucket_bytes")},
            parameter_bytes=tuple(4 * n for n in point.workload().parameter_sizes),
        ),
        "predicted_s": predicted.step,
        "predicted_exposed_s": predicted.exposed_sync,
        "alpha_s": fit.network.alpha,
        "beta_s_per_byte": fit.network.beta,
        "fit_rms": fit.relative_rms,
    }
    if inside:
        record.update(
            inside_link=inside[1],
            inside_alpha_s=inside[0].network.alpha,
            inside_beta_s_per_byte=inside[0].network.beta,
        )
    record["microbatches_per_s"] = point.workers * point.accumulation / record["measured_s"]
    record["ratio"] = record["predicted_s"] / record["measured_s"]
    return record


def with_speedups(records: list[dict]) -> list[dict]:
    """Each record's speedup in samples per second over 1 worker of the same case, link, bucket size
    and accumulation, measured and predicted."""

    def key(r: dict) -> tuple:
        case = "production" if r["case"] == "two-level" else r["case"]  # the same job, on fewer nodes
        return (case, r["link"], r["bucket_mb"], r["accumulation"])

    one = {key(r): r for r in records if r["workers"] == 1}
    for r in records:
        if key(r) in one:
            base = one[key(r)]
            r["speedup"] = r["workers"] * base["measured_s"] / r["measured_s"]
            r["predicted_speedup"] = r["workers"] * base["predicted_s"] / r["predicted_s"]
    return records


def format_table(records: list[dict], machine: dict) -> str:
    from distdocs.bench.harness import machine_line, table

    first = records[0]
    nodes = "one worker per node"
    if inside := {r["inside_link"] for r in records if "inside_link" in r}:
        nodes += f" (two-level: {NODES} nodes of {PER_NODE}, {', '.join(sorted(inside))} inside a node)"
    setup = (
        f"emulated accelerators: compute is a wait, backward {first['backward_share']:.2f} of it; {nodes}; "
        "predicted = distdocs.costmodel with alpha and beta fitted on the same links"
    )
    columns = [
        ("case", 13),
        ("link", 7),
        ("bucket", 6),
        ("workers", 7),
        ("accum", 5),
        ("step (ms)", 9),
        ("best", 7),
        ("compute", 7),
        ("predicted", 9),
        ("ratio", 5),
        ("speedup", 7),
        ("model", 6),
    ]
    rows = [
        [
            r["case"],
            r["link"],
            "ddp" if r["bucket_mb"] is None else f"{r['bucket_mb']:g}",
            str(r["workers"]),
            str(r["accumulation"]),
            f"{r['measured_s'] * 1e3:.1f}",
            f"{r['best_s'] * 1e3:.1f}",
            "-" if r["compute_s"] is None else f"{r['compute_s'] * 1e3:.1f}",
            f"{r['predicted_s'] * 1e3:.1f}",
            f"{r['ratio']:.2f}",
            f"{r['speedup']:.2f}x" if "speedup" in r else "-",
            f"{r['predicted_speedup']:.2f}x" if "speedup" in r else "-",
        ]
        for r in records
    ]
    fits = sorted({(r["link"], r["alpha_s"], r["beta_s_per_byte"]) for r in records})
    fitted = "; ".join(f"{link}: alpha {a * 1e6:.0f} us, {8 / b / 1e6:.1f} Mbit/s" for link, a, b in fits)
    cost = f"# the run: {first['run_wall_s']:.0f} s of wall time, {first['run_cpu_s']:.0f} s of CPU"
    return "\n".join([table(machine_line(machine, setup), columns, rows), f"# fitted: {fitted}", cost])


def plot(records: list[dict], machine: dict) -> str:
    """The kitchen: throughput against workers for the production case at every link rate measured,
    one micro-batch per step; the points measured, the lines the cost model's."""
    mine = [r for r in records if r["case"] == "production" and r["accumulation"] == 1 and "speedup" in r]
    curves = {
        link.replace("mbit", " Mbit/s").replace("gbit", " Gbit/s"): [r for r in mine if r["link"] == link]
        for link in sorted({r["link"] for r in mine}, key=links.rate_bits, reverse=True)
    }
    return _speedups(curves, machine, f"one micro-batch of {mine[0]['compute_ms']:.1f} ms per step")


def plot_accumulation(records: list[dict], machine: dict) -> str:
    """The production case at the live link: 1, 4 and 16 micro-batches per step."""
    mine = [r for r in records if r["case"] == "production" and r["link"] == LIVE_LINK and "speedup" in r]
    curves = {
        f"{k} micro-batch{'es' if k > 1 else ''} per step": [r for r in mine if r["accumulation"] == k]
        for k in sorted({r["accumulation"] for r in mine}, reverse=True)
        if len([r for r in mine if r["accumulation"] == k]) > 2
    }
    return _speedups(curves, machine, LIVE_LINK.replace("mbit", " Mbit/s"))


def _speedups(curves: dict[str, list[dict]], machine: dict, what: str) -> str:
    """Speedup against workers: per curve the measured points and the model's line, and the ideal."""
    from distdocs.figures import pyplot, to_svg

    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    sizes = sorted({r["workers"] for line in curves.values() for r in line})
    ax.plot(sizes, sizes, color="0.6", linestyle="--", label="ideal: n workers, n times the samples")
    for (name, line), marker in zip(curves.items(), "osD^"):
        line = sorted(line, key=lambda r: r["workers"])
        (drawn,) = ax.plot([r["workers"] for r in line], [r["predicted_speedup"] for r in line], "-", linewidth=1)
        ax.plot(
            [r["workers"] for r in line],
            [r["speedup"] for r in line],
            marker,
            color=drawn.get_color(),
            label=f"{name}: measured (points), model (line)",
        )
    ax.set(xlabel="workers (emulated accelerators, one per node)", ylabel="speedup in samples/s over 1 worker")
    ax.set_xticks(sizes)
    ax.set_ylim(0, max(sizes) + 0.5)
    first = next(iter(curves.values()))[0]
    ax.set_title(
        f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}\n"
        f"{first['gradient_bytes'] / MiB:g} MiB of gradients, {what}",
        fontsize=8,
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return to_svg(fig)


def plot_buckets(records: list[dict], machine: dict) -> str:
    """DDP's bucket_cap_mb on the scale model: the step at 8 workers against the bucket size, measured
    (points) and the cost model's (line), and the same model with one allreduce at a time (dotted)."""
    from distdocs.figures import pyplot, to_svg

    mine = sorted((r for r in records if r["case"] == "buckets" and r["bucket_mb"]), key=lambda r: r["bucket_mb"])
    fig, ax = pyplot().subplots(figsize=(6.4, 4.2))
    caps = [r["bucket_mb"] for r in mine]
    one_lane = []
    for r in mine:
        point = Point(r["workers"], r["accumulation"], r["gradient_bytes"], r["compute_ms"] / 1e3, r["layers"])
        point = replace(point, bucket_mb=r["bucket_mb"])
        net = costmodel.Network(r["alpha_s"], r["beta_s_per_byte"])
        one_lane.append(costmodel.step_time(point.workload(), point.workers, net).step * 1e3)
    (line,) = ax.plot(caps, [r["predicted_s"] * 1e3 for r in mine], "-", label="the cost model: gloo's two at once")
    ax.plot(caps, one_lane, ":", color=line.get_color(), label="the cost model: one allreduce at a time")
    ax.plot(caps, [r["measured_s"] * 1e3 for r in mine], "o", color=line.get_color(), label="measured")
    compute = mine[0]["compute_ms"]
    ax.axhline(compute, color="0.6", linestyle="--", label="the compute alone")
    ax.set(xscale="log", xlabel="bucket_cap_mb (MiB)", ylabel="step at 8 workers (ms)", ylim=(0, None))
    ax.set_xticks(caps, [f"{c:g}" for c in caps])
    ax.minorticks_off()
    ax.set_title(
        f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}\n"
        f"{mine[0]['gradient_bytes'] / MiB:g} MiB of gradients in {mine[0]['layers']} layers, 8 workers, "
        f"{mine[0]['link'].replace('mbit', ' Mbit/s')}",
        fontsize=8,
    )
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return to_svg(fig)


# The saved sweep's two other figures, besides the kitchen that `--figure` draws:
#     python -m distdocs.bench.emulated {accumulation,buckets} DATA.json OUT.svg
FIGURES = {"accumulation": plot_accumulation, "buckets": plot_buckets}

if __name__ == "__main__":
    import json
    import sys

    if len(sys.argv) != 4 or sys.argv[1] not in FIGURES:
        sys.exit(f"usage: python -m distdocs.bench.emulated {{{','.join(FIGURES)}}} DATA.json OUT.svg")
    with open(sys.argv[2]) as f:
        data = json.load(f)
    with open(sys.argv[3], "w") as f:
        f.write(FIGURES[sys.argv[1]](data["records"], data["machine"]))
