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
import contextlib
import resource
import statistics
import time
from dataclasses import asdict, dataclass, replace

from distdocs.arguments import UsageError, parse_list, parse_rate, require
from distdocs.calculators import costmodel, fits
from distdocs.lab import links
from distdocs.lab.emulated import Point, allreduce_timings, measure
from distdocs.lab.wire import LinkSpec
from distdocs.lab.world import World, forked_cpu_seconds

MiB = 2**20
# The production case, scaled (see the docstring): the real job and its scale model.
RESNET50 = {"params": 25_557_032, "step_s": 112 / 367, "link": "1gbit", "gpu": "V100 16GB, FP32, batch 112"}
GRADIENT_SCALE = RESNET50["params"] * 4 / (2 * MiB)  # 48.7
LINK_SCALE = 10


def scaled_caps(shrink: float) -> dict:
    """DDP's default bucket caps for a gradient `shrink` times smaller than the real job's, so that the
    scale model has as many buckets as the job: 25 MiB and a first bucket of 1 MiB on ResNet-50's
    102.2 MB are about 0.51 MiB and 21 KiB on 2 MiB."""
    return {
        "bucket_mb": costmodel.DDP_BUCKET_BYTES / MiB / shrink,
        "first_bucket_mb": costmodel.DDP_FIRST_BUCKET_BYTES / MiB / shrink,
    }


SCALED_BUCKETS = scaled_caps(GRADIENT_SCALE)
PRODUCTION = {
    "gradient_bytes": 2 * MiB,
    "compute_s": round(RESNET50["step_s"] * LINK_SCALE / GRADIENT_SCALE, 4),
    **SCALED_BUCKETS,
}
COMPUTE_BOUND = {"gradient_bytes": 32 * 1024, "compute_s": 0.4}
LIVE_LINK = "100mbit"
SWEEP_LINKS = ("50mbit", "100mbit", "200mbit")
# bucket_cap_mb on a model whose backward is about as long as its sync at 8 workers: too small a bucket
# pays α per bucket, too large a one starts its allreduce late.
BUCKETS = {"gradient_bytes": 2 * MiB, "compute_s": 0.4, "layers": 64}
BUCKET_CAPS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0)
# Under tc: α from gloo's all_reduce of 4 bytes, whose time is all latency; β from 1 MiB, DDP's first
# bucket. Messages in between are distorted by tbf's bucket (distdocs.lab.links.burst_bytes), which lets
# the first 64 KiB after a pause through at once: they would pass for faster links with slower messages.
# Under the ranks' pacing: from 256 KiB and 1 MiB, messages whose time the link sets, as DDP's buckets'
# is. A tiny message's time there is the ranks' own Python ring, about 0.4 ms a message at 2 workers and
# 1.8 ms at 8 on 2 cores, which the wire hides under a bucket's bytes (distdocs.lab.wire.Wire.exchange).
FIT_SIZES = {"tc": (4, MiB), "ranks": (MiB // 4, MiB)}
FIT_WORKERS = (2, 8)
GLOO_LANES = 2  # ProcessGroupGloo's worker threads: DDP's bucket allreduces run two at a time
# Under the ranks' emulation DDP's hook runs one allreduce at a time (distdocs.lab.wire.Lane).
LANES = {"tc": GLOO_LANES, "ranks": 1}
EMULATIONS = ("auto", "tc", "ranks")
# Ranks are processes whose compute is a wait: 16 of them take about 200 MB each (torch, forked from one
# server that loaded it) and little CPU, but gloo's host work at the end of each step, 16 ranks' worth,
# queues on the cores; past 16 on 2 cores that queue is what a step measures, not the link.
MAX_WORKERS = 16
# Two levels: 2 nodes of 4 workers, the link inside a node (its loopback) 10 times the one between, as
# NVLink is many times a node's network card; at the live link, with 1 and 4 micro-batches.
NODES, PER_NODE, INSIDE_LINK = 2, 4, "1gbit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", help=f"comma-separated worker counts, up to {MAX_WORKERS}, 1 among them (default: 1,2,4,8)"
    )
    parser.add_argument("--accumulation", help="micro-batches per step, comma-separated (default: 1,4)")
    parser.add_argument("--link", help=f"link rates, comma-separated, as in 100mbit (default: {LIVE_LINK})")
    parser.add_argument(
        "--link-emulation",
        choices=EMULATIONS,
        default="auto",
        help="tc: tc's tbf between network namespaces (root, Linux); ranks: each rank paces the messages it "
        "sends (anyone, anywhere); auto: tc where it can be built, else ranks (default)",
    )
    parser.add_argument(
        "--per-node", type=int, default=1, help="workers per node, numbered node by node (default: 1, a node each)"
    )
    parser.add_argument("--inside", help="the link inside a node, with --per-node (default: 10 times --link)")
    parser.add_argument(
        "--latency-us", type=float, default=0.0, help="each message's latency in µs, on top (ranks only; default: 0)"
    )
    parser.add_argument("--gradient-mb", type=float, help="gradient size in MiB (default: the production case's, 2)")
    parser.add_argument(
        "--compute-ms", type=float, help="one micro-batch's forward and backward in ms (default: the production case's)"
    )
    parser.add_argument(
        "--bucket-mb", help="DDP bucket_cap_mb values, comma-separated (default: DDP's own, scaled with the gradient)"
    )
    parser.add_argument(
        "--job",
        metavar="GRADIENT_MB,COMPUTE_MS,LINK",
        help="a real job, as the debugging guide's time_the_sync prints it: its gradient in MiB, one "
        "micro-batch's forward and backward in ms, and the link between its nodes; scaled as the "
        "production case is (default: 1,2,4,8,16 workers, 1 micro-batch a step)",
    )
    parser.add_argument("--layers", type=int, default=8, help="layers the gradient is split into (default: 8)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per point (default: 3)")
    parser.add_argument("--sweep", action="store_true", help="the saved sweep: three link rates, k up to 16, buckets")


def choose_emulation(asked: str, latency_s: float = 0.0) -> tuple[str, str]:
    """The link emulation for --link-emulation `asked` ("tc" or "ranks"), and why, in a few words."""
    if asked == "ranks":
        return "ranks", "asked for"
    if latency_s:
        require(asked == "auto", "--latency-us needs --link-emulation ranks: tbf adds no latency")
        return "ranks", "a latency was dialled, which tbf cannot add"
    try:
        links.check_can_build()
    except links.LinkError as err:
        if asked == "tc":
            raise UsageError(str(err)) from None
        return "ranks", str(err).split(";")[0].split(" (")[0]
    return "tc", "asked for" if asked == "tc" else "it can be built here"


EMULATION_SAYS = {
    "tc": "links: tc's tbf between network namespaces",
    "ranks": "links: emulated in the ranks, each pacing the messages it sends",
}


def live_points() -> list[Point]:
    """The live subset, at one link rate."""
    # Two and eight workers at one micro-batch are also timed under no_sync(): the debugging guide's split,
    # and the sync that bf16 gradients halve (the same 8 workers, the bf16 point below).
    grid = [
        Point(n, k, **PRODUCTION, case="production", split=(n, k) in ((2, 1), (8, 1)))
        for k in (1, 4)
        for n in (1, 2, 4, 8)
    ]
    bf16 = [Point(8, 1, **PRODUCTION, case="bf16-wire", compress="bf16", split=True)]
    # The global batch held at 8 micro-batches (8 workers x 1, 4 x 2, 2 x 4, 1 x 8), and 1 worker at 2.
    held = [Point(n, k, **PRODUCTION, case="production") for n, k in ((4, 2), (1, 2), (1, 8))]
    compute = [Point(n, 1, **COMPUTE_BOUND, case="compute-bound") for n in (1, 2, 4, 8)]
    return grid + held + compute + bf16


def sweep_points(link: str) -> list[Point]:
    """The saved sweep's points at one link rate: the production case at k = 1, 4, 16, and at 100
    Mbit/s the live subset's other points and the bucket sweep."""
    live = link == LIVE_LINK
    points = [
        Point(n, k, **PRODUCTION, case="production", split=live and (n, k) in ((2, 1), (8, 1)))
        for k in (1, 4, 16)
        for n in (1, 2, 4, 8)
    ]
    if live:
        points += [p for p in live_points() if p not in points]
        points += [Point(8, 1, **BUCKETS, bucket_mb=cap, case="buckets") for cap in (*BUCKET_CAPS, None)]
    return points


def scale_job(spec: str) -> dict:
    """A real job (`--job GRADIENT_MB,COMPUTE_MS,LINK`) as the scale model runs it: its gradient shrunk (or
    grown) to 2 MiB and its link to LIVE_LINK, its compute stretched by as much as its sync, so that
    compute against sync, and every speedup, are the job's; DDP's bucket caps shrink with the gradient."""
    try:
        gradient_mb, compute_ms, link = (part.strip() for part in spec.split(","))
        gradient, compute, rate = float(gradient_mb) * MiB, float(compute_ms) / 1e3, parse_rate(link)
    except ValueError:
        raise UsageError(f"--job: expected GRADIENT_MB,COMPUTE_MS,LINK as in 97.5,305,1gbit, got {spec!r}") from None
    require(gradient > 0 and compute > 0, "--job: the gradient and the compute must be positive")
    shrink = gradient / PRODUCTION["gradient_bytes"]
    stretch = rate / parse_rate(LIVE_LINK) / shrink
    scaled = compute * stretch
    require(1e-3 <= scaled <= 10, f"--job: scaled, a micro-batch takes {scaled * 1e3:.4g} ms; 1 ms to 10 s run here")
    return {
        "point": {"gradient_bytes": PRODUCTION["gradient_bytes"], "compute_s": scaled, **scaled_caps(shrink)},
        "job": {"gradient_mb": gradient / MiB, "compute_ms": compute * 1e3, "link": link, "time_scale": stretch},
    }


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    if args.job:
        require(args.gradient_mb is None and args.compute_ms is None and args.link is None and not args.bucket_mb,
                "--job sets the gradient, the compute, the link and the buckets")  # fmt: skip
        require(not args.sweep and args.layers == 8, "--job takes no --sweep or --layers")
    custom = any(getattr(args, f) is not None for f in ("workers", "accumulation", "gradient_mb", "compute_ms", "job"))
    shaped = args.per_node != 1 or args.inside is not None
    require(not (args.sweep and (custom or args.link or shaped)), "--sweep takes no workload, link or node flags")
    require(1 <= args.layers <= 256 and args.steps >= 1, "--layers must be 1 to 256, --steps positive")
    require(args.per_node >= 1 and args.latency_us >= 0, "--per-node must be positive, --latency-us 0 or more")
    rates = [r.strip() for r in (args.link or LIVE_LINK).split(",")] if not args.sweep else list(SWEEP_LINKS)
    for flag, rate in [*(("--link", r) for r in rates), ("--inside", args.inside or "1gbit")]:
        try:
            parse_rate(rate)
        except UsageError as e:
            raise UsageError(f"{flag}: {e}") from None
    require(args.inside is None or args.per_node > 1, "--inside needs --per-node of 2 or more")
    workers = parse_list(args.workers or ("1,2,4,8,16" if args.job else "1,2,4,8"), int, "--workers", minimum=1)
    require(max(workers) <= MAX_WORKERS and 1 in workers, f"--workers: {MAX_WORKERS} at most, and 1 among them")
    k = args.per_node
    require(all(n <= k or n % k == 0 for n in workers), f"--workers must fill nodes of --per-node {k}")
    emulation, why = choose_emulation(args.link_emulation, args.latency_us / 1e6)
    if progress:
        progress(f"{EMULATION_SAYS[emulation]} ({why})")
    shape = Shape(emulation, k, args.inside, args.latency_us / 1e6)
    if args.sweep:
        return run({rate: sweep_points(rate) for rate in rates}, args.steps, progress, shape, two_level=True)
    elif custom or args.bucket_mb:
        ks = parse_list(args.accumulation or ("1" if args.job else "1,4"), int, "--accumulation", minimum=1)
        if args.job:
            job = scale_job(args.job)
            points = [Point(n, k, **job["point"], case="your-job") for k in ks for n in workers]
            return [{**r, "job": job["job"]} for r in run({LIVE_LINK: points}, args.steps, progress, shape)]
        gradient = round((args.gradient_mb if args.gradient_mb is not None else 2) * MiB)
        compute = args.compute_ms / 1e3 if args.compute_ms is not None else PRODUCTION["compute_s"]
        require(gradient >= 4 * args.layers and compute > 0, "--gradient-mb and --compute-ms must be positive")
        gradient -= gradient % (4 * args.layers)  # whole float32 parameters, the same size in every layer
        # The production case's workload, unless the flags change it
        same = args.gradient_mb is None and args.compute_ms is None and args.layers == 8
        case = "production" if same else "custom"
        if args.bucket_mb:
            caps = [{"bucket_mb": c} for c in parse_list(args.bucket_mb, float, "--bucket-mb", minimum=1e-3)]
        else:
            caps = [SCALED_BUCKETS if same else {}]
        points = [Point(1, k, gradient, compute, args.layers, case=case, **cap) for cap in caps for k in ks]
        points = [replace(p, workers=n) for p in points for n in workers]
        by_link = {rate: points for rate in rates}
    else:
        live = live_points()
        by_link = {rate: [p for p in live if p.workers in workers] for rate in rates}
    return run(by_link, args.steps, progress, shape)


@dataclass(frozen=True)
class Shape:
    """How the workers meet: the link's emulation ("tc" or "ranks"), workers per node, the link inside a
    node (None: 10 times the link between), and, for the ranks' emulation, each message's latency."""

    emulation: str = "tc"
    per_node: int = 1
    inside: str | None = None
    latency_s: float = 0.0

    def inside_rate(self, rate: str) -> str:
        if self.inside:
            return self.inside
        bits = parse_rate(rate) * 10
        return f"{bits / 1e9:g}gbit" if bits % 1e9 == 0 else f"{bits / 1e6:g}mbit"

    def wire(self, rate: str, per_node: int | None = None) -> LinkSpec | None:
        """The ranks' emulated link at `rate`; None under tc."""
        if self.emulation != "ranks":
            return None
        k = self.per_node if per_node is None else per_node
        return LinkSpec(rate, self.latency_s, k, self.inside_rate(rate) if k > 1 else None)


def run(
    by_link: dict[str, list[Point]],
    steps: int = 3,
    progress=None,
    shape: Shape = Shape(),
    two_level: bool = False,
) -> list[dict]:
    """Measure every point at its link rate, on one world; return the records, each with its prediction
    and its speedup over 1 worker. With `two_level`, then the production case at 8 workers on NODES
    nodes of PER_NODE, at the live link rate (or the first, without it)."""
    size = max(max(p.workers for p in points) for points in by_link.values())
    size = max(size, *FIT_WORKERS)
    records, fits = [], {}
    start, cpu = time.monotonic(), _cpu_seconds()
    if shape.per_node > 1:
        for rate, points in by_link.items():
            fits[rate] = _fit_between(rate, shape, progress)
            records += measure_on_nodes(points, rate, fits[rate], steps, shape, progress)
    else:
        with _world(size, next(iter(by_link)), shape) as (world, net):
            for rate, points in by_link.items():
                if net:
                    net.set_rate(rate)
                if progress:
                    progress(f"{rate}: fitting α and β, then {len(points)} points")
                fits[rate] = _fit(world, list(FIT_WORKERS), shape, shape.wire(rate))
                for found in world.run(measure, points, steps, 1, shape.wire(rate))[0]:
                    records.append(_record(found, rate, fits[rate], shape))
    if two_level:
        rate = LIVE_LINK if LIVE_LINK in by_link else next(iter(by_link))
        nodes = Shape(shape.emulation, PER_NODE, INSIDE_LINK, shape.latency_s)
        points = [Point(NODES * PER_NODE, k, **PRODUCTION, case="two-level") for k in (1, 4)]
        records += measure_on_nodes(points, rate, fits[rate], steps, nodes, progress)
    cost = {"run_wall_s": time.monotonic() - start, "run_cpu_s": _cpu_seconds() - cpu}
    return with_speedups([{**r, **cost} for r in records])


@contextlib.contextmanager
def _world(size: int, rate: str, shape: Shape, per_node: int = 1, inside: str | None = None):
    """A world of `size` ranks, `per_node` to a node, numbered node by node: under tc, the nodes are
    namespaces of a dialled network (yielded too, to set its rate), `inside` dialled on each node's
    loopback; under the ranks' emulation, all on loopback (no network: the wire paces them)."""
    if shape.emulation == "ranks":
        with World(size, timeout_s=900) as world:
            yield world, None
        return
    with links.Network(size // per_node, rate, inside=inside) as net:
        places = [node.namespace for node in net.nodes for _ in range(per_node)]
        with World(size, timeout_s=900, namespaces=places) as world:
            yield world, net


def _fit(world: World, workers: list[int], shape: Shape, wire: LinkSpec | None) -> fits.Fit:
    """α and β fitted to allreduces of FIT_SIZES at each of `workers`, on the world's first ranks."""
    timings = world.run(allreduce_timings, list(FIT_SIZES[shape.emulation]), workers, 5, wire)[0]
    fit = fits.fit_alpha_beta(timings, impl=timings[0]["impl"])
    return replace(fit, network=replace(fit.network, concurrent=LANES[shape.emulation]))


def _fit_between(rate: str, shape: Shape, progress=None) -> fits.Fit:
    """The link between nodes, fitted with one worker per node."""
    if progress:
        progress(f"{rate}: fitting α and β between nodes")
    with _world(max(FIT_WORKERS), rate, shape) as (world, _):
        return _fit(world, list(FIT_WORKERS), shape, shape.wire(rate, per_node=1))


def measure_on_nodes(
    points: list[Point], rate: str, between: fits.Fit, steps: int, shape: Shape, progress=None
) -> list[dict]:
    """`points` on workers that fill nodes of `shape.per_node`: DDP's one flat ring over all of them,
    numbered node by node. α and β inside a node are fitted on its own link (the first node's 2 and
    all its workers); between the nodes, `between`. The model prices each step of the flat ring at
    its slowest link."""
    k, inside = shape.per_node, shape.inside_rate(rate)
    size = max(p.workers for p in points)
    size += -size % k
    if progress:
        progress(f"{size // k} nodes of {k} workers: {rate} between, {inside} inside")
    with _world(size, rate, shape, k, inside) as (world, _):
        inside_fit = _fit(world, sorted({2, k}), shape, shape.wire(inside, per_node=1))
        found = world.run(measure, points, steps, 1, shape.wire(rate))[0]
    return [_record(f, rate, between, shape, inside=(inside_fit, inside)) for f in found]


def _cpu_seconds() -> float:
    """CPU time of this process, of its children that have ended, and of the forkserver and the world's
    ranks it forked, once they have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_cpu_seconds()


def _record(found: dict, link: str, fit: fits.Fit, shape: Shape, inside: tuple[fits.Fit, str] | None = None) -> dict:
    """One point's record: `fit` is the link between the nodes; with `inside` (its fit and rate), the
    workers fill nodes of `shape.per_node`."""
    point = Point(**{k: found[k] for k in asdict(Point(1, 1, 4, 1.0))})
    per_node, inside_net = (shape.per_node, inside[0].network) if inside else (1, None)
    work = point.workload()
    predicted = costmodel.step_time(work, point.workers, fit.network, "ring", per_node, inside_net)
    steps = found["steps_s"]
    record = {
        "case": point.case,
        "workers": point.workers,
        "nodes": max(1, point.workers // per_node),
        "per_node": per_node,
        "link": link,
        "link_emulation": shape.emulation,
        "latency_us": shape.latency_s * 1e6,
        "accumulation": point.accumulation,
        "gradient_bytes": point.gradient_bytes,
        "compute_ms": point.compute_s * 1e3,
        "layers": point.layers,
        "bucket_mb": point.bucket_mb,
        "bucket_cap_mb": work.bucket_bytes / MiB,  # DDP's caps as it used them: every bucket's, the first's
        "first_bucket_cap_mb": work.first_bucket_bytes / MiB,
        "backward_share": point.backward_share,
        "compress": point.compress,
        "measured_s": statistics.median(steps),
        "best_s": min(steps),
        "steps_s": steps,
        "compute_s": statistics.median(found["compute_steps_s"]) if point.split else None,
        "ddp_bucket_bytes": found["ddp_bucket_bytes"],
        "model_bucket_bytes": costmodel.ddp_buckets(
            point.gradient_bytes,
            work.bucket_bytes,
            work.first_bucket_bytes,
            parameter_bytes=tuple(4 * n for n in work.parameter_sizes),
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
        return (case, r["link"], r["link_emulation"], r["bucket_mb"], r["accumulation"])

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
    shapes = sorted({(r["case"] == "two-level", r["per_node"], r.get("inside_link")) for r in records})
    nodes = "; ".join(
        ("two-level: " if two else "") + ("one worker per node" if k == 1 else f"nodes of {k}, {inside} inside")
        for two, k, inside in shapes
    )
    emulation = EMULATION_SAYS[first["link_emulation"]]
    if first["latency_us"]:
        emulation += f", {first['latency_us']:g} us a message"
    setup = (
        f"{emulation}; emulated accelerators: compute is a wait, backward {first['backward_share']:.2f} of it; "
        f"{nodes}; predicted = distdocs.calculators.costmodel with alpha and beta fitted on the same links"
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
            "ddp" if r["bucket_mb"] is None else f"{r['bucket_mb']:.3g}",
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
    lines = [table(machine_line(machine, setup), columns, rows), f"# fitted: {fitted}", cost]
    if job := first.get("job"):
        lines.insert(1, (
            f"# your job, scaled: {job['gradient_mb']:.4g} MiB of gradients over {job['link']} with "
            f"{job['compute_ms']:.4g} ms a micro-batch runs as {PRODUCTION['gradient_bytes'] / MiB:g} MiB over "
            f"{LIVE_LINK} with {job['compute_ms'] * job['time_scale']:.4g} ms: every time {job['time_scale']:.3g} "
            "times the job's, every speedup the job's"
        ))  # fmt: skip
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """The kitchen: throughput against workers for the production case at every link rate measured,
    one micro-batch per step; the points measured, the lines the cost model's."""
    mine = [r for r in records if r["case"] == "production" and r["accumulation"] == 1 and "speedup" in r]
    curves = {
        link.replace("mbit", " Mbit/s").replace("gbit", " Gbit/s"): [r for r in mine if r["link"] == link]
        for link in sorted({r["link"] for r in mine}, key=parse_rate, reverse=True)
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
        for r in line[1:]:  # each measured speedup, readable without the axis; 1 worker is 1 by definition
            ax.annotate(f"{r['speedup']:.2f}×", (r["workers"], r["speedup"]), textcoords="offset points",
                        xytext=(6, -3), fontsize=7, color=drawn.get_color())  # fmt: skip
    ax.set(xlabel="workers (emulated accelerators, one per node)", ylabel="speedup in samples/s over 1 worker")
    ax.set_xticks(sizes)
    ax.set_xlim(min(sizes) - 0.4, max(sizes) * 1.12)  # room for the last points' labels
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
