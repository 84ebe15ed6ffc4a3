"""Gradient compression over dialled links: torch's own DDP communication hooks, each measured for
the bytes it sends, the step time it buys and the loss it costs.

Every hook trains the same model on the same data for the same steps, in a world of its own (one
PowerSGD state per process group), 2 ranks on 2 nodes joined by a link of the rate given
(distdocs.lab.links), and at 1 rank for the cost model's computation. Each hook is wrapped by a counting
hook, which adds up the gradient bytes DDP hands it, while every `dist.all_reduce` the hook calls
(PowerSGD calls three per bucket, two of them from callbacks) adds its payload. On a node, the
kernel's own count of the bytes its link sent (/proc/net/dev) is read around the timed steps too:
TCP/IP headers and acknowledgements ride on top of the payload.

The cost model (distdocs.calculators.costmodel) predicts the 2-rank step from other runs: the 1-rank step with
the same hook (its compression work included), α and β fitted to a gloo allreduce sweep on the same
link, and the hook's compression factor from arithmetic (`payload_bytes`), not from the count.

PowerSGD runs plain allreduce for its first `start_powerSGD_iter` steps (here START_ITER, the least
that error feedback allows); the warm-up steps cover them, so every timed step is compressed.
DDP refuses `bf16_compress_hook` by name unless it has NCCL or XCCL; gloo reduces bfloat16 on the
CPU, so the hook runs here under the counting hook's name.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from distdocs.arguments import require
from distdocs.bench.allreduce_sweep import LINK_SWEEP_SIZES, SWEEP_SIZES, bench_allreduce
from distdocs.bench.harness import WARMUP, machine_line, merge_runs, mlp, node_sent_bytes, parse_links, table, world_on

HOOKS = ("none", "fp16", "bf16", "powersgd-1", "powersgd-1-no-ef", "powersgd-4", "powersgd-4-no-ef")
START_ITER = 2  # PowerSGD's plain-allreduce steps before compressing; error feedback needs more than 1
MIN_COMPRESSION_RATE = 2  # PowerSGDState's default: a matrix is compressed only if this pays 2x
LR = 1e-3  # Adam's


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--link",
        metavar="RATES",
        default="1gbit,100mbit",
        help="comma-separated rates in tc's spelling for the 2 nodes' link (needs root), or loopback "
        "(default: 1gbit,100mbit)",
    )
    parser.add_argument(
        "--hooks", default=",".join(HOOKS), help=f"comma-separated, of {', '.join(HOOKS)} (default: all)"
    )
    parser.add_argument("--width", type=int, default=1024, help="the MLP's width (default: 1024)")
    parser.add_argument("--depth", type=int, default=4, help="its Linear layers (default: 4)")
    parser.add_argument("--batch", type=int, default=16, help="samples per rank and step (default: 16)")
    parser.add_argument(
        "--steps", type=int, default=8, help=f"timed steps, after {WARMUP + START_ITER} untimed (default: 8)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="whole runs, in fresh worlds; medians kept (default: 1)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    hooks = [h.strip() for h in args.hooks.split(",") if h.strip()]
    require(bool(hooks) and set(hooks) <= set(HOOKS), f"--hooks: expected some of {', '.join(HOOKS)}")
    require(min(args.width, args.depth, args.batch, args.steps, args.repeat) >= 1, "sizes and counts must be positive")
    rates = parse_links(args.link, [2], nodes=2)
    return bench_compression(rates, hooks, (args.width, args.depth, args.batch), args.steps, args.repeat, progress)


def payload_calls(shapes: list[tuple[int, ...]], hook: str, element_bytes: int = 4) -> list[int]:
    """The bytes of each all_reduce a rank starts per step under `hook`, for one DDP bucket, from the
    parameters' shapes alone: the bucket, whole or cast to 16 bits; for PowerSGD at rank r, the
    tensors it sends whole (vectors, and matrices not worth compressing), then every P (n·r per n×m
    matrix), then every Q (m·r), as powerSGD_hook decides them."""
    numel = sum(math.prod(s) for s in shapes)
    if hook == "none":
        return [numel * element_bytes]
    if hook in ("fp16", "bf16"):
        return [numel * 2]
    rank = int(hook.split("-")[1])
    whole = ps = qs = 0
    for s in shapes:
        n, m = s[0], math.prod(s[1:])
        r = min(n, m, rank)
        if len(s) >= 2 and (n + m) * r * MIN_COMPRESSION_RATE < n * m:
            ps, qs = ps + n * r, qs + m * r
        else:
            whole += n * m
    return [count * element_bytes for count in (whole, ps, qs)]


def payload_bytes(shapes: list[tuple[int, ...]], hook: str, element_bytes: int = 4) -> int:
    """The bytes a rank allreduces per step under `hook`: half of the gradient for fp16 and bf16; for
    PowerSGD at rank r, (n + m)·r per n×m matrix worth compressing and every other tensor whole."""
    return sum(payload_calls(shapes, hook, element_bytes))


def _hook(name: str, group):
    """(state, hook) for DDP's register_comm_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    if name == "none":  # what DDP does without a hook: average, then one allreduce per bucket
        return group, default_hooks.allreduce_hook
    if name in ("fp16", "bf16"):
        return group, getattr(default_hooks, f"{name}_compress_hook")
    state = powersgd.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=int(name.split("-")[1]),
        start_powerSGD_iter=START_ITER,
        min_compression_rate=MIN_COMPRESSION_RATE,
        use_error_feedback=not name.endswith("no-ef"),
        warm_start=not name.endswith("no-ef"),
    )
    return state, powersgd.powerSGD_hook


class Counter:
    """Gradient bytes handed to the hook and payload bytes of every dist.all_reduce, while entered."""

    def __init__(self) -> None:
        self.gradient_bytes = self.payload_bytes = 0
        self.calls: list[int] = []  # the bytes of each all_reduce since the last reset

    @contextlib.contextmanager
    def counting(self):
        real = dist.all_reduce

        def all_reduce(tensor, *args, **kwargs):
            self.payload_bytes += tensor.numel() * tensor.element_size()
            self.calls.append(tensor.numel() * tensor.element_size())
            return real(tensor, *args, **kwargs)

        dist.all_reduce = all_reduce
        try:
            yield self
        finally:
            dist.all_reduce = real

    def wrap(self, hook):
        def counting_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            self.gradient_bytes += bucket.buffer().numel() * bucket.buffer().element_size()
            return hook(state, bucket)

        # DDP checks these annotations; this module's `from __future__ import annotations` made them strings
        counting_hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
        return counting_hook


def _train(rank: int, world_size: int, hook_name: str, size: tuple[int, int, int], steps: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    width, depth, batch = size
    net = mlp(width, depth)[:-1]  # no ReLU after the last layer: the targets are signed
    # One bucket for every hook: with two, PowerSGD's callbacks can issue one bucket's allreduces
    # while the backward pass issues the next bucket's, in another order on each rank (see the docstring).
    model = DDP(net, bucket_cap_mb=sum(p.numel() * p.element_size() for p in net.parameters()) / 2**20 + 1)
    counter = Counter()
    state, hook = _hook(hook_name, dist.group.WORLD)
    model.register_comm_hook(state, counter.wrap(hook))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    # The task: fit this rank's fixed batch to a fixed random linear map, the same for every hook.
    gen = torch.Generator().manual_seed(1)
    target_map = torch.randn(width, width, generator=gen) / math.sqrt(width)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(rank))
    y = x @ target_map.T

    def step(i: int) -> None:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    untimed = WARMUP + START_ITER
    times = []
    with counter.counting():
        for i in range(untimed):
            step(i)
        counter.gradient_bytes = counter.payload_bytes = 0
        sent = node_sent_bytes()
        for i in range(steps):  # timed here, not by slowest_rank_seconds: its all_reduce would be counted
            counter.calls = []
            dist.barrier()
            start = time.perf_counter()
            step(untimed + i)
            times.append(time.perf_counter() - start)
        gradient, payload = counter.gradient_bytes, counter.payload_bytes
        sent = node_sent_bytes() - sent if sent is not None else None
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # a step is done when its slowest rank is
    with torch.no_grad():  # the loss over every rank's batch, after the same steps
        loss = nn.functional.mse_loss(model.module(x), y).reshape(1)
    dist.all_reduce(loss)
    return {
        "hook": hook_name,
        "world_size": world_size,
        "width": width,
        "depth": depth,
        "batch_per_rank": batch,
        "steps": untimed + steps,
        "shapes": [list(p.shape) for p in model.parameters()],
        "gradient_bytes": gradient // steps,
        "payload_bytes": payload // steps,
        "payload_calls": counter.calls,  # the last step's all_reduces, in bytes
        "sent_bytes": sent / steps if sent is not None else None,  # with headers, acks and the barriers
        "step_s": statistics.median(slowest.tolist()),
        "loss": loss.item() / world_size,
    }


def bench_compression(
    rates: list[str | None],
    hooks: list[str],
    size: tuple[int, int, int],
    steps: int = 8,
    repeat: int = 1,
    progress=None,
) -> list[dict]:
    """Per hook: the step at 1 rank, at 2 ranks over loopback, and at 2 ranks on 2 nodes over a link
    of each rate, with the counted bytes and the loss; α and β fitted on every link; then the cost
    model's prediction of each dialled 2-rank step (predict)."""
    from distdocs.calculators.fits import fit_alpha_beta

    places = [(1, None), (2, None)] + [(2, link) for link in rates if link]
    runs = []
    for r in range(repeat):
        records = []
        for hook in hooks:  # a hook's runs back to back: the predicted run's inputs see the same machine
            for n, link in places:
                if progress:
                    where = f"2 nodes, {link} link" if link else f"{n} rank{'s' * (n > 1)}, loopback"
                    progress(f"run {r + 1}/{repeat}, {hook}, {where}: {steps} steps")
                with contextlib.ExitStack() as stack:
                    found = world_on(stack, n, link, nodes=2, timeout_s=180).run(_train, hook, size, steps)[0]
                records.append({**found, "link": link or "loopback"})
        records.sort(
            key=lambda x: (x["world_size"], [None, *rates].index(None if x["link"] == "loopback" else x["link"]))
        )
        for _, link in places[1:]:
            sizes = LINK_SWEEP_SIZES if link else SWEEP_SIZES
            sweep = bench_allreduce([2], sizes, iters=5, impls=("gloo",), link=link, nodes=2)
            fit = fit_alpha_beta(sweep, "gloo", world_size=2, link=link or "loopback")
            for x in records:
                if x["world_size"] == 2 and x["link"] == (link or "loopback"):
                    x.update(alpha_s=fit.network.alpha, beta_s_per_byte=fit.network.beta)
        runs.append(predict(records))
    return merge_runs(runs)


def predict(records: list[dict]) -> list[dict]:
    """The cost model's step time for every 2-rank record on a dialled link, from other runs: the same
    hook's 2-rank step over loopback, less the α-β time of its payload there, is the computation (the
    compression's included); the α-β time of the payload on the link is added (Workload.compression,
    from payload_calls). The dialled link lets its bucket's burst through at once after a pause
    (distdocs.lab.links.burst_bytes), so each all_reduce's first burst of bytes is counted as free: it
    matters only for PowerSGD's small messages. `ratio_from_1_rank` feeds the 1-rank step instead: on
    a machine whose ranks share cores, it misses by their slowing each other down."""
    from distdocs.calculators.costmodel import Network, Workload, step_time
    from distdocs.lab import links

    def model(base: dict, compute_s: float, net: Network, factor: float):
        work = Workload(
            params=base["gradient_bytes"] / 4,
            compute_per_sample=compute_s / base["batch_per_rank"],
            micro_batch=base["batch_per_rank"],
            bucket_bytes=base["gradient_bytes"],  # one bucket, as trained
            first_bucket_bytes=base["gradient_bytes"],
            overlap=False,  # a CPU rank's one core computes and syncs in turn
            compression=factor,
        )
        return step_time(work, 2, net)

    def network(x: dict) -> Network:
        return Network(x["alpha_s"], x["beta_s_per_byte"])

    one = {x["hook"]: x for x in records if x["world_size"] == 1}
    loop = {x["hook"]: x for x in records if x["world_size"] == 2 and x["link"] == "loopback"}
    for x in records:
        calls = payload_calls([tuple(s) for s in x["shapes"]], x["hook"])
        factor = sum(calls) / x["gradient_bytes"]
        x["compression"] = factor
        if x["world_size"] != 2 or x["link"] == "loopback":
            continue
        burst = links.burst_bytes(x["link"])
        on_link = sum(max(0, c - burst) for c in calls) / x["gradient_bytes"]
        base = loop[x["hook"]]
        compute = base["step_s"] - model(base, base["step_s"], network(base), factor).sync
        predicted = model(base, compute, network(x), on_link).step if on_link else compute
        from_one = model(one[x["hook"]], one[x["hook"]]["step_s"], network(x), on_link or factor).step
        x.update(
            burst_bytes=burst,
            compression_on_link=on_link,
            compute_fed_s=compute,
            predicted_step_s=predicted,
            ratio=predicted / x["step_s"],
            ratio_from_1_rank=from_one / x["step_s"],
        )
    return records


def format_table(records: list[dict], machine: dict) -> str:
    none = {x["link"]: x for x in records if x["hook"] == "none" and x["world_size"] == 2}
    rows = []
    for x in (x for x in records if x["world_size"] == 2):
        base, predicted = none[x["link"]], "ratio" in x
        rows.append(
            [
                x["link"],
                x["hook"],
                f"{x['payload_bytes'] / 2**20:.3f}",
                f"{x['gradient_bytes'] / x['payload_bytes']:.1f}x",
                f"{x['sent_bytes'] / x['payload_bytes']:.3f}" if x["sent_bytes"] else "-",
                f"{x['step_s'] * 1e3:.1f}",
                f"{base['step_s'] / x['step_s']:.2f}x",
                f"{x['predicted_step_s'] * 1e3:.1f}" if predicted else "-",
                f"{x['ratio']:.2f}" if predicted else "-",
                f"{x['ratio_range'][0]:.2f}-{x['ratio_range'][1]:.2f}" if predicted else "-",
                f"{x['ratio_from_1_rank']:.2f}" if predicted else "-",
                f"{x['loss']:.4f}",
                f"{x['loss'] / base['loss']:.2f}",
            ]
        )
    first = records[0]
    setup = (
        f"MLP {first['width']} wide, {first['depth']} layers, {first['batch_per_rank']} samples per rank, "
        f"{first['steps']} steps; 2 ranks, on 2 nodes over a dialled link; medians of {first['repeats']} runs"
    )
    columns = [
        ("link", 8),
        ("hook", 16),
        ("MiB/step", 8),
        ("smaller", 7),
        ("sent/payload", 12),
        ("step (ms)", 9),
        ("speedup", 7),
        ("predicted", 9),
        ("ratio", 5),
        ("range", 9),
        ("from 1 rank", 11),
        ("loss", 6),
        ("vs none", 7),
    ]
    return table(machine_line(machine, setup), columns, rows)


def plot(records: list[dict], machine: dict) -> str:
    """Left, the 2-rank step time of every hook on every link (log scale), bars measured and ticks
    predicted; right, the loss after the same steps, per hook."""
    from distdocs.figures import pyplot, to_svg

    two = [x for x in records if x["world_size"] == 2]
    hooks = list(dict.fromkeys(x["hook"] for x in two))
    places = list(dict.fromkeys(x["link"] for x in two))
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(9.6, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(places)
    for j, (link, colour) in enumerate(zip(places, ["C0", "C1", "C2", "C3"])):
        mine = {x["hook"]: x for x in two if x["link"] == link}
        xs = [i + (j - (len(places) - 1) / 2) * width for i in range(len(hooks))]
        name = "loopback, one machine" if link == "loopback" else f"{link} link between 2 nodes"
        left.bar(xs, [mine[h]["step_s"] * 1e3 for h in hooks], width, color=colour, label=f"{name}: measured")
        predicted = [(x, mine[h]["predicted_step_s"] * 1e3) for x, h in zip(xs, hooks) if "ratio" in mine[h]]
        if predicted:
            px, py = zip(*predicted)
            left.plot(px, py, "_", color="black", markersize=12, markeredgewidth=2)
    left.plot([], [], "_", color="black", markersize=12, markeredgewidth=2, label="cost model's prediction")
    left.set(yscale="log", ylabel="2-rank step (ms, log scale)", xticks=range(len(hooks)))
    left.set_xticklabels(hooks, rotation=30, ha="right", fontsize=8)
    left.legend(fontsize=7, loc="upper right")
    losses = {x["hook"]: x["loss"] for x in two}  # the same on every link: the same sums
    right.bar(range(len(hooks)), [losses[h] for h in hooks], 0.6, color="0.5")
    right.set(ylabel=f"loss after {two[0]['steps']} steps", xticks=range(len(hooks)))
    right.set_xticklabels(hooks, rotation=30, ha="right", fontsize=8)
    fig.suptitle(f"{machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['date']}", fontsize=8)
    fig.tight_layout()
    return to_svg(fig)
