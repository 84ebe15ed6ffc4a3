"""A cost model of one data-parallel training step: what it costs to compute, what it costs to sync
the gradients, and how much of the sync hides behind the backward pass.

Allreduce follows the α-β model (Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", 2005): a message costs α seconds to start and β seconds per byte.
For S bytes on n ranks, with the algorithms `distdocs.training.collectives` builds:

| algorithm | messages on the critical path | bytes each rank sends, in units of S |
|---|---|---|
| ring (reduce-scatter, then all-gather) | 2(n-1) | 2(n-1)/n |
| tree (binomial, up then down) | 2·ceil(log2 n) | 2·ceil(log2 n) |
| naive (all to rank 0, then back) | 2(n-1) | 2(n-1), at rank 0 |

A step of `accumulation` micro-batches computes `micro_batch` samples per micro-batch on each rank
and syncs once, at the end (DDP's `no_sync()` on the others). DDP splits the gradients into buckets
and starts a bucket's allreduce as soon as the backward pass has produced it, so the sync of all
but the last bucket can hide behind the rest of the backward pass. The buckets are DDP's own
(`ddp_buckets`): from its second step on, DDP packs the gradients in the order backward produces
them, the first bucket up to 1 MiB so that the first allreduce starts early, the others up to
`bucket_cap_mb`. The model takes the gradients as ready at an even rate, by bytes, through the
backward pass. An allreduce starts when its bucket is ready and the backend has a lane free: NCCL
runs one at a time, gloo two (`Network.concurrent`). The bytes of two at once still cross the link
one after the other; what the second lane hides is the other's per-message latency, which is what
makes many small buckets cheaper under gloo than one at a time would be.
A communication hook that compresses (fp16, bf16, PowerSGD) allreduces `compression` times the
gradient's bytes; its own computation is the caller's to add to the step's.

Ranks spread over nodes meet two links: fast inside a node, slower between nodes.
`flat_ring_on_nodes_seconds` and `two_level_seconds` price the flat ring and the two-level
allreduce there, each link with its own α and β.

`predict_steps()` runs the model over many world sizes; `distdocs sim` prints it. Its α and β, and
a workload, can come from saved benchmark records instead of by hand: `distdocs.calculators.fits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "tree", "naive", "two-level")
GRADIENT_BYTES = {"fp32": 4, "bf16": 2}
DDP_BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb=25
# DDP's first bucket when bucket_cap_mb is left at its default (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES);
# given bucket_cap_mb, DDP makes its first bucket as large as the others.
DDP_FIRST_BUCKET_BYTES = 2**20
BACKWARD_SHARE = 2 / 3  # backward costs about twice the forward: 2/3 of the compute


@dataclass(frozen=True)
class Network:
    """α (seconds per message) and β (seconds per byte) of the links between ranks."""

    alpha: float
    beta: float
    name: str = ""
    # Allreduces the backend runs at once: 1 for NCCL (one stream per communicator), 2 for gloo
    # (ProcessGroupGloo's two worker threads). Two at once share the link's bytes but not their latency.
    concurrent: int = 1

    def __post_init__(self):
        if not (self.alpha >= 0 and self.beta > 0 and math.isfinite(self.alpha + self.beta)):
            raise ValueError(f"network: alpha must be >= 0 and beta > 0, not {self.alpha!r} and {self.beta!r}")
        if not (isinstance(self.concurrent, int) and self.concurrent >= 1):
            raise ValueError(f"network: concurrent must be a whole number of at least 1, not {self.concurrent!r}")

    @classmethod
    def from_bandwidth(cls, gb_per_s: float, latency_us: float, name: str = "") -> Network:
        """A link of `gb_per_s` GB/s (1e9 bytes per second, each direction) and `latency_us` µs."""
        if not gb_per_s > 0:
            raise ValueError(f"bandwidth must be positive, not {gb_per_s!r} GB/s")
        if not latency_us >= 0:
            raise ValueError(f"latency must be zero or positive, not {latency_us!r} µs")
        return cls(latency_us * 1e-6, 1 / (gb_per_s * 1e9), name)

    @property
    def gb_per_s(self) -> float:
        return 1 / self.beta / 1e9


# Nominal link rates per GPU and direction, and a typical per-message latency. Real allreduces reach
# 70-90% of the rate. Sources: PCIe 4.0 x16 is 32 GB/s per direction (PCI-SIG), NVLink 4 on an H100
# SXM is 900 GB/s in both directions together (NVIDIA's H100 datasheet), InfiniBand NDR is 400 Gb/s
# per port, and 100 Gb Ethernet is 12.5 GB/s.
PRESETS = {
    "pcie4": Network.from_bandwidth(25, 10, "PCIe 4.0 x16"),
    "nvlink4": Network.from_bandwidth(450, 3, "NVLink 4 (H100 SXM)"),
    "ib-400g": Network.from_bandwidth(50, 10, "InfiniBand NDR, 400 Gb/s"),
    "eth-100g": Network.from_bandwidth(12.5, 30, "Ethernet, 100 Gb/s"),
}


def allreduce_terms(world_size: int, algorithm: str = "ring") -> tuple[float, float]:
    """(messages, bytes factor): an allreduce of S bytes costs messages·α + factor·S·β."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
    if not (isinstance(world_size, int) and world_size >= 1):
        raise ValueError(f"world_size must be a positive whole number, not {world_size!r}")
    n = world_size
    if algorithm in ("ring", "two-level"):  # one rank per node: the two-level allreduce is the ring across
        return 2 * (n - 1), 2 * (n - 1) / n
    if algorithm == "tree":
        rounds = 2 * math.ceil(math.log2(n)) if n > 1 else 0
        return rounds, rounds
    return 2 * (n - 1), 2 * (n - 1)


def allreduce_seconds(nbytes: float, world_size: int, network: Network, algorithm: str = "ring") -> float:
    """The α-β time of one allreduce of `nbytes` bytes over `world_size` ranks."""
    if not nbytes >= 0:
        raise ValueError(f"nbytes must be zero or positive, not {nbytes!r}")
    messages, factor = allreduce_terms(world_size, algorithm)
    return messages * network.alpha + factor * nbytes * network.beta if nbytes else 0.0


def flat_ring_on_nodes_seconds(
    nbytes: float, ranks_per_node: int, nodes: int, inside: Network, between: Network
) -> float:
    """A ring over every rank, numbered node by node, when the ranks of a node share one link to the
    others (`between`) and talk over `inside` within the node. The ring crosses from node to node
    once per node and direction, so each node's link carries one stream each way; each of the
    2(n-1) steps waits for its slowest link: between the nodes, when there are two or more."""
    n = ranks_per_node * nodes
    if n == 1 or not nbytes:
        return 0.0
    link = between if nodes > 1 else inside
    return 2 * (n - 1) * (link.alpha + nbytes / n * link.beta)


def two_level_seconds(nbytes: float, ranks_per_node: int, nodes: int, inside: Network, between: Network) -> float:
    """distdocs.training.collectives.two_level_allreduce on the same nodes: a ring reduce-scatter inside each
    node, k = ranks_per_node rings of N = nodes ranks across (one per local rank, each on S/k bytes),
    and a ring all-gather inside. The k rings share each node's link, so their steps carry k times a
    ring's bytes through it: 2(N-1)/N * S across in all, against the flat ring's 2(n-1)/n * S."""
    k, big_n = ranks_per_node, nodes
    if not nbytes:
        return 0.0
    within = (k - 1) * (inside.alpha + nbytes / k * inside.beta)  # the reduce-scatter; the all-gather too
    across = 2 * (big_n - 1) * (between.alpha + nbytes / (k * big_n) * k * between.beta)
    return 2 * within + across


def allreduce_on_nodes_seconds(
    nbytes: float,
    world_size: int,
    between: Network,
    algorithm: str = "ring",
    ranks_per_node: int = 1,
    inside: Network | None = None,
) -> float:
    """One allreduce of `nbytes` over `world_size` ranks that fill nodes of `ranks_per_node`, joined
    by `between` and linked by `inside` within a node. With one rank per node (or no `inside`), every
    link is `between`: allreduce_seconds. The ring and the two-level allreduce know the two links;
    the tree and naive allreduces are priced at the slower one."""
    k = min(ranks_per_node, world_size)
    if k <= 1 or inside is None:
        return allreduce_seconds(nbytes, world_size, between, algorithm)
    if world_size % k:
        raise ValueError(f"{world_size} ranks do not fill nodes of {ranks_per_node}")
    if world_size == k:  # one node: only the inside link
        return allreduce_seconds(nbytes, world_size, inside, algorithm)
    if algorithm == "ring":
        return flat_ring_on_nodes_seconds(nbytes, k, world_size // k, inside, between)
    if algorithm == "two-level":
        return two_level_seconds(nbytes, k, world_size // k, inside, between)
    return allreduce_seconds(nbytes, world_size, between, algorithm)


@dataclass(frozen=True)
class Workload:
    """One data-parallel training step, per rank."""

    params: float  # parameters whose gradients are allreduced
    compute_per_sample: float  # seconds of forward and backward per sample, on one rank
    micro_batch: int  # samples per rank per micro-batch
    accumulation: int = 1  # micro-batches per optimizer step; only the last syncs
    gradient_dtype: str = "fp32"
    bucket_bytes: float = DDP_BUCKET_BYTES
    overlap: bool = True  # buckets allreduce during the backward pass, as DDP does
    compression: float = 1.0  # bytes allreduced / gradient bytes: 0.5 for fp16 or bf16, less for PowerSGD
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES  # bucket_bytes for a DDP given bucket_cap_mb
    # The parameters' sizes (elements), in the order backward produces their gradients (the last layer's
    # first), adding up to `params`: DDP closes a bucket only at a parameter's end. Empty: many small ones.
    parameter_sizes: tuple[int, ...] = ()

    def __post_init__(self):
        for name in (
            "params",
            "compute_per_sample",
            "micro_batch",
            "accumulation",
            "bucket_bytes",
            "compression",
            "first_bucket_bytes",
        ):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be positive, not {value!r}")
        if self.gradient_dtype not in GRADIENT_BYTES:
            raise ValueError(f"gradient_dtype must be one of {', '.join(GRADIENT_BYTES)}, not {self.gradient_dtype!r}")
        if self.parameter_sizes and (
            min(self.parameter_sizes) <= 0 or not math.isclose(sum(self.parameter_sizes), self.params)
        ):
            raise ValueError(f"parameter_sizes must be positive and add up to params ({self.params:g})")

    @property
    def gradient_bytes(self) -> float:
        return self.params * GRADIENT_BYTES[self.gradient_dtype]


def ddp_buckets(
    gradient_bytes: float,
    bucket_bytes: float = DDP_BUCKET_BYTES,
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
    parameter_bytes: tuple[float, ...] = (),
) -> list[float]:
    """The bytes of each bucket DDP allreduces, in the order backward fills them. From its second step
    on DDP packs the gradients in the order they become ready, and a bucket closes once it holds its
    limit or more: the first bucket's limit is `first_bucket_bytes`, every other's `bucket_bytes`
    (the C++ Reducer's compute_bucket_assignment_by_size). A bucket ends at a parameter's end; with no
    `parameter_bytes`, the gradient is many small parameters and the buckets are the limits exactly."""
    if not parameter_bytes:
        buckets, left, limit = [], gradient_bytes, first_bucket_bytes
        while left > 0:
            buckets.append(min(limit, left))
            left -= buckets[-1]
            limit = bucket_bytes
        return buckets or [0.0]
    buckets, size, limit = [], 0.0, first_bucket_bytes
    for nbytes in parameter_bytes:
        size += nbytes
        if size >= limit:
            buckets.append(size)
            size, limit = 0.0, bucket_bytes
    return buckets + [size] if size else buckets


@dataclass(frozen=True)
class Step:
    world_size: int
    compute: float  # seconds of computation per step
    sync: float  # seconds of allreduce per step, all buckets
    exposed_sync: float  # the part of `sync` the backward pass does not hide
    samples_per_s: float
    speedup: float = 1.0  # samples/s over one rank's
    efficiency: float = 1.0  # speedup / world size

    @property
    def step(self) -> float:
        return self.compute + self.exposed_sync


def step_time(
    work: Workload,
    world_size: int,
    network: Network,
    algorithm: str = "ring",
    ranks_per_node: int = 1,
    inside: Network | None = None,
) -> Step:
    """The modelled time of one step at `world_size` ranks; with `ranks_per_node` and `inside`, the
    ranks fill nodes linked by `inside` within and by `network` between (allreduce_on_nodes_seconds)."""
    compute = work.compute_per_sample * work.micro_batch * work.accumulation
    element = GRADIENT_BYTES[work.gradient_dtype]
    parameter_bytes = tuple(n * element for n in work.parameter_sizes)
    sizes = ddp_buckets(work.gradient_bytes, work.bucket_bytes, work.first_bucket_bytes, parameter_bytes)

    def seconds(nbytes: float) -> float:
        return allreduce_on_nodes_seconds(nbytes, world_size, network, algorithm, ranks_per_node, inside)

    times = [seconds(b * work.compression) for b in sizes]
    sync = sum(times)
    # The last micro-batch's backward produces each bucket when the bytes before its end are done
    # (without overlap, all of them when it ends). An allreduce starts when its bucket is ready and a
    # lane is free (`network.concurrent` lanes); its bytes cross the link after the previous one's.
    window = BACKWARD_SHARE * work.compute_per_sample * work.micro_batch
    latency = 2 * seconds(1.0) - seconds(2.0)  # the α part: each time here is α part + a part linear in bytes
    total, filled, ends = sum(sizes), 0.0, []
    for nbytes, whole in zip(sizes, times, strict=True):
        filled += nbytes
        ready = window * (filled / total) if total and work.overlap else window
        start = max(ready, ends[-network.concurrent]) if len(ends) >= network.concurrent else ready
        ends.append(max(start + whole, (ends[-1] if ends else 0.0) + whole - latency))
    exposed = max(0.0, ends[-1] - window) if ends else 0.0
    samples = world_size * work.micro_batch * work.accumulation
    return Step(world_size, compute, sync, exposed, samples / (compute + exposed))


def predict_steps(
    work: Workload,
    world_sizes: list[int],
    network: Network,
    algorithm: str = "ring",
    ranks_per_node: int = 1,
    inside: Network | None = None,
) -> list[Step]:
    """step_time() at every world size, with speedup and efficiency against one rank."""
    if not world_sizes:
        raise ValueError("world_sizes must name at least one world size")
    one = step_time(work, 1, network, algorithm, ranks_per_node, inside).samples_per_s
    steps = []
    for n in world_sizes:
        s = step_time(work, n, network, algorithm, ranks_per_node, inside)
        steps.append(
            Step(
                n, s.compute, s.sync, s.exposed_sync, s.samples_per_s, s.samples_per_s / one, s.samples_per_s / one / n
            )
        )
    return steps


def format_table(work: Workload, network: Network, algorithm: str, steps: list[Step]) -> str:
    """The table `distdocs sim` prints."""
    lines = [
        f"# model: {work.params / 1e6:g}M parameters, {work.gradient_dtype} gradients "
        f"({work.gradient_bytes / 2**20:.1f} MiB), {work.compute_per_sample * 1e3:g} ms per sample, "
        f"micro-batch {work.micro_batch} x {work.accumulation} per rank, "
        f"{'overlapped' if work.overlap else 'no overlap'}",
        f"# network: {network.name or 'given'}, alpha {network.alpha * 1e6:.3g} us, "
        f"{network.gb_per_s:.3g} GB/s, {algorithm} allreduce",
        f"{'ranks':>6} {'compute (ms)':>12} {'sync (ms)':>10} {'exposed':>8} {'step (ms)':>10} "
        f"{'samples/s':>11} {'speedup':>8} {'efficiency':>10}",
    ]
    for s in steps:
        lines.append(
            f"{s.world_size:>6} {s.compute * 1e3:>12.2f} {s.sync * 1e3:>10.2f} {s.exposed_sync * 1e3:>8.2f} "
            f"{s.step * 1e3:>10.2f} {s.samples_per_s:>11.1f} {s.speedup:>7.2f}x {s.efficiency:>9.0%}"
        )
    return "\n".join(lines)
