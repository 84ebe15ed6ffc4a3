"""Emulated accelerators: ranks whose computation is a wait, inside torch's own DDP, over real links.

On a GPU the host mostly waits while a kernel runs, and a waiting process costs no CPU. So a rank
here computes nothing: each layer's forward waits its share of a stated time, and its backward
waits its share and returns a gradient of the layer's real size. Everything a distributed step does
around that is real: `DistributedDataParallel` with its Reducer (its buckets, the allreduces it
starts while backward runs, `no_sync`), gloo, the bytes, and the link they cross, which
`distdocs.lab.links` dials. Eight such ranks fit on two cores, and what they measure is what the
cost model (`distdocs.calculators.costmodel`) predicts: compute against sync.

    with links.Network(8, "100mbit") as net, World(8, namespaces=net.node_namespaces()) as world:
        world.run(measure, [Point(workers=8, accumulation=1, gradient_bytes=2 << 20, compute_s=0.06)])

The gradients are integers, (this rank's place in its group + 1) per micro-batch, so that DDP's
average over n ranks, k micro-batches each, is exactly k(n+1)/2 at every power-of-two n. Every step
checks every element of every gradient against it, bitwise.

What the emulation leaves out: the GPU's own memory traffic and any contention between compute and
communication on the device (NCCL's kernels take SMs; here the link alone is shared), and the host
work of a real step, which is the same at every size.
"""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn

from distdocs.calculators import costmodel
from distdocs.lab.wire import Lane, LinkSpec, Wire, ring_hook
from distdocs.training.collectives import ring_allreduce
from distdocs.training.timing import slowest_rank_seconds

BACKWARD_SHARE = costmodel.BACKWARD_SHARE
# A kernel launched up to this long after the previous one ended counts as queued behind it: a GPU
# runs its stream's kernels back to back while the host goes ahead. Without it each of the host's
# delays between layers (autograd, DDP's hooks, a late wake-up on a busy machine) would add to the
# emulated compute.
QUEUE_S = 0.02


class Device:
    """One emulated accelerator: runs "kernels" of a given length one after another, as a stream."""

    def __init__(self) -> None:
        self.free_at = 0.0

    def run(self, seconds: float) -> None:
        """Return when a kernel of `seconds`, launched now, has finished."""
        now = time.perf_counter()
        self.free_at = (self.free_at if now - self.free_at <= QUEUE_S else now) + seconds
        if (delay := self.free_at - time.perf_counter()) > 0:
            time.sleep(delay)


class _Layer(torch.autograd.Function):
    """y = x, in `forward_s`; backward in `backward_s`, with `value` everywhere in the weight's gradient."""

    @staticmethod
    def forward(ctx, x, weight, model):
        model.device.run(model.forward_s)
        ctx.model, ctx.shape = model, weight.shape
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        model = ctx.model
        model.device.run(model.backward_s)
        return grad, torch.full(ctx.shape, model.value), None


class EmulatedModel(nn.Module):
    """`layers` layers holding `gradient_bytes` of float32 parameters between them, whose forward and
    backward together take `compute_s` per micro-batch: `backward_share` of it backward."""

    def __init__(
        self, gradient_bytes: int, compute_s: float, layers: int = 8, backward_share: float = BACKWARD_SHARE
    ) -> None:
        super().__init__()
        if gradient_bytes % (4 * layers):
            raise ValueError(f"gradient_bytes {gradient_bytes} must divide into {layers} layers of float32")
        self.weights = nn.ParameterList(nn.Parameter(torch.zeros(gradient_bytes // 4 // layers)) for _ in range(layers))
        self.forward_s = compute_s * (1 - backward_share) / layers
        self.backward_s = compute_s * backward_share / layers
        self.device = Device()
        self.value = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for weight in self.weights:
            x = _Layer.apply(x, weight, self)
        return x


@dataclass(frozen=True)
class Point:
    """One setting to measure: `workers` ranks (the first of the world) training `accumulation`
    micro-batches of `compute_s` each per step, on `gradient_bytes` of gradients in `layers` layers.
    `bucket_mb` is DDP's bucket_cap_mb and `first_bucket_mb` its first bucket's (None: DDP's defaults,
    25 after a first bucket of 1; `bucket_mb` alone: every bucket that size, as DDP makes them)."""

    workers: int
    accumulation: int
    gradient_bytes: int
    compute_s: float
    layers: int = 8
    bucket_mb: float | None = None
    first_bucket_mb: float | None = None
    backward_share: float = BACKWARD_SHARE
    case: str = ""
    split: bool = False  # also time the step under no_sync(): its computation alone
    compress: str | None = None  # "bf16": the gradients travel in bfloat16 (torch's bf16_compress_hook)

    def ddp_options(self) -> dict:
        """DDP's arguments for these buckets: bucket_cap_mb_list names the first bucket's cap and the
        others' (the last one given applies to every later bucket)."""
        if self.bucket_mb is None:
            return {}
        if self.first_bucket_mb is None or self.first_bucket_mb == self.bucket_mb:
            return {"bucket_cap_mb": self.bucket_mb}
        return {"bucket_cap_mb_list": [self.first_bucket_mb, self.bucket_mb]}

    def workload(self) -> costmodel.Workload:
        """What the cost model is told of this point: the gradient, its parameters in the order
        backward produces them, the compute, and DDP's buckets."""
        buckets = {}
        if self.bucket_mb is not None:
            first = self.bucket_mb if self.first_bucket_mb is None else self.first_bucket_mb
            buckets = {"bucket_bytes": self.bucket_mb * 2**20, "first_bucket_bytes": first * 2**20}
        return costmodel.Workload(
            params=self.gradient_bytes / 4,
            compute_per_sample=self.compute_s,
            micro_batch=1,
            accumulation=self.accumulation,
            parameter_sizes=(self.gradient_bytes // 4 // self.layers,) * self.layers,
            compression=0.5 if self.compress == "bf16" else 1.0,  # DDP's buckets are fp32's; the wire's bytes half
            **buckets,
        )


@contextlib.contextmanager
def groups(world_size: int, sizes: list[int]):
    """A process group of the first n ranks for each n in `sizes`, destroyed on the way out: a group
    still held when the default group is destroyed keeps gloo's threads alive, racing the exit. Every
    rank must enter it alike (new_group is collective)."""
    made = {}
    try:
        for n in sorted(set(sizes)):
            if n > world_size:
                raise ValueError(f"{n} workers asked of a world of {world_size}")
            made[n] = dist.new_group(list(range(n)))
        yield made
    finally:
        gc.collect()  # the DDP models that hold the groups sit in reference cycles: free them first
        for group in made.values():
            if group != dist.GroupMember.NON_GROUP_MEMBER:
                dist.destroy_process_group(group)


def _step(ddp, accumulation: int, sync: bool = True) -> None:
    """One optimizer step's forward and backward passes: `accumulation` micro-batches, DDP's sync
    on the last (none, with `sync` False)."""
    ddp.module.device.free_at = time.perf_counter()  # an idle device: the first kernel starts when launched
    for micro in range(accumulation):
        x = torch.ones(1, requires_grad=True)
        if micro < accumulation - 1 or not sync:
            with ddp.no_sync():
                ddp(x).sum().backward()
        else:
            ddp(x).sum().backward()


def _check(model: EmulatedModel, accumulation: int, workers: int, synced: bool) -> None:
    if synced:
        expect = accumulation * (workers + 1) / 2
    else:
        expect = accumulation * model.value
    for i, weight in enumerate(model.weights):
        if not torch.equal(weight.grad, torch.full_like(weight.grad, expect)):
            wrong = weight.grad[weight.grad != expect]
            raise AssertionError(f"layer {i}: gradient {wrong[0].item()} where {expect} was due")
        weight.grad = None


def measure(
    rank: int, world_size: int, points: list[Point], steps: int = 3, warmup: int = 1, wire: LinkSpec | None = None
) -> list[dict | None]:
    """On every rank of a World: each point's DDP step, `steps` times after `warmup` untimed steps
    (the first builds DDP's buckets in the order backward fills them), and, for a point that asks
    (`split`), its computation alone (the same step under `no_sync()`), taking turns. With `wire`, DDP
    syncs over the link emulated in the ranks (distdocs.lab.wire); without, with gloo's allreduce over
    whatever network the ranks sit on. Returns, on each rank of a point's workers, one record per
    point (None where the rank is not one of them): the slowest rank's step times and compute times,
    in seconds, and the bytes of each bucket DDP built."""
    with groups(world_size, [p.workers for p in points]) as by_size:
        records = []
        for point in points:
            mine = rank < point.workers
            records.append(_measure(point, by_size[point.workers], steps, warmup, wire) if mine else None)
            dist.barrier()
        return records


def _measure(point: Point, group, steps: int, warmup: int, wire: LinkSpec | None) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = EmulatedModel(point.gradient_bytes, point.compute_s, point.layers, point.backward_share)
    model.value = float(dist.get_rank(group) + 1)
    ddp = DDP(model, process_group=group, **point.ddp_options())
    dtype = torch.bfloat16 if point.compress == "bf16" else None
    lane = Lane(group, Wire(wire, dist.get_rank()), dtype) if wire else None
    if lane:
        ddp.register_comm_hook(lane, ring_hook)
    elif dtype:
        ddp.register_comm_hook(group, bf16_over_gloo)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for i in range(warmup + steps):
            for sync in (True, False) if point.split else (True,):
                elapsed = slowest_rank_seconds(lambda: _step(ddp, point.accumulation, sync), group)  # noqa: B023
                _check(model, point.accumulation, point.workers, sync)
                if i >= warmup:
                    times[sync].append(elapsed)
    finally:
        if lane:
            lane.close()
    # The buckets DDP rebuilt after its first step, in the order it allreduces them.
    built = ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
    buckets = [int(b) for b in built.split(",")] if built else []
    return {**asdict(point), "steps_s": times[True], "compute_steps_s": times[False], "ddp_bucket_bytes": buckets}


def bf16_over_gloo(group, bucket):  # no annotations: DDP checks them as objects, and this module's are strings
    """torch's bf16_compress_hook itself (cast, divide, allreduce, copy back), under a name DDP lets gloo
    run: it refuses that hook by name without NCCL or XCCL."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    return bf16_compress_hook(group, bucket)


def allreduce_timings(
    rank: int, world_size: int, sizes: list[int], workers: list[int], repeat: int = 5, wire: LinkSpec | None = None
) -> list[dict]:
    """gloo's all_reduce of each size at each world size, over the links the world's ranks sit on, or
    with `wire` the ring over the link emulated in the ranks, as DDP's hook runs it: the timings
    `distdocs.calculators.fits.fit_alpha_beta` fits α and β to. Each time is the best of `repeat`, each
    of two all_reduces back to back, halved: DDP's buckets follow each other so, and a lone message
    would get the link's burst (distdocs.lab.links.burst_bytes) for free. The best, as the link test
    and iperf take a link's rate: on a busy machine waiting for a CPU only ever adds time, and a
    median of three slowed by it once made the link look 10% slower than the steps found it."""
    records = []
    with groups(world_size, workers) as by_size:
        for n in workers:
            for nbytes in sizes:
                if rank < n:
                    records.append(_allreduce_timing(by_size[n], nbytes, repeat, wire))
                dist.barrier()
    return records


def _allreduce_timing(group, nbytes: int, repeat: int, spec: LinkSpec | None) -> dict:
    tensor = torch.zeros(max(1, nbytes // 4))
    wire = Wire(spec, dist.get_rank()) if spec else None

    def allreduce():
        if wire:
            wire.start()
            ring_allreduce(tensor, group, validate=False, wire=wire)
        else:
            dist.all_reduce(tensor, group=group)

    def twice():
        allreduce()
        allreduce()

    slowest_rank_seconds(twice, group)
    times = [slowest_rank_seconds(twice, group) / 2 for _ in range(repeat)]
    size = dist.get_world_size(group)
    return {"impl": "ring" if wire else "gloo", "world_size": size, "bytes": nbytes, "time_s": min(times)}
