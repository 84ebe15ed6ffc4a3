"""Data-parallel training simulated in one process, for the lab: workers are list entries, each
computes the gradient of its shard, and the allreduce algorithms run step by step over a list of
buffers, recording who holds which partial sum after every step and how many bytes each worker sent.

Nothing here is distributed: it is the arithmetic of data parallelism, small enough to print.
`distdocs.training.collectives` runs the same algorithms between real processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn


def split_batch(x: torch.Tensor, y: torch.Tensor, sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Cut a batch into consecutive shards of the given sizes, one per worker."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must hold the same number of samples, got {x.shape[0]} and {y.shape[0]}")
    if not sizes or any(s < 1 for s in sizes) or sum(sizes) != x.shape[0]:
        raise ValueError(f"sizes must be positive and add up to the batch of {x.shape[0]}, got {sizes}")
    return list(zip(x.split(sizes), y.split(sizes)))


def shard_gradients(
    model: nn.Module, loss_fn: Callable, shards: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[list[torch.Tensor]]:
    """Each worker's gradient of the mean loss over its own shard, one list of tensors per worker."""
    grads = []
    for x, y in shards:
        model.zero_grad()
        loss_fn(model(x), y).backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    model.zero_grad()
    return grads


def merge_gradients(grads: list[list[torch.Tensor]], weights: list[float] | None = None) -> list[torch.Tensor]:
    """The workers' gradients averaged, each weighted by `weights` (shard sizes, say) if given. Equal
    weights are what DDP does: right when every shard is the same size."""
    if not grads or len({len(g) for g in grads}) != 1:
        raise ValueError("grads must be one list of tensors per worker, all of the same length")
    weights = [1.0] * len(grads) if weights is None else [float(w) for w in weights]
    if len(weights) != len(grads) or any(w <= 0 for w in weights):
        raise ValueError(f"weights must be {len(grads)} positive numbers, one per worker, got {weights}")
    total = sum(weights)
    return [sum(w * g[i] for w, g in zip(weights, grads)) / total for i in range(len(grads[0]))]


@dataclass
class Trace:
    """What an allreduce did: after each step, which workers' data each chunk of each worker sums
    (`holdings[step][worker][chunk]`, a sorted tuple of worker ids); the bytes each worker sent."""

    workers: int
    chunks: int
    holdings: list[list[list[tuple[int, ...]]]] = field(default_factory=list)
    bytes_sent: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.holdings) - 1  # the first entry is the start

    def table(self, step: int) -> str:
        """One step as a text table: a row per worker, a column per chunk, each cell the workers
        whose data that chunk holds the sum of (`all` once it holds everyone's)."""
        everyone = tuple(range(self.workers))
        cell = lambda held: "all" if held == everyone else "+".join(map(str, held))  # noqa: E731
        width = max(len(cell(h)) for row in self.holdings[step] for h in row) + 2
        lines = ["worker " + "".join(f"{f'chunk {c}':>{max(width, 9)}}" for c in range(self.chunks))]
        for w, row in enumerate(self.holdings[step]):
            lines.append(f"{w:>6} " + "".join(f"{cell(h):>{max(width, 9)}}" for h in row))
        return "\n".join(lines)


def _check_buffers(buffers: list[torch.Tensor]) -> None:
    if len(buffers) < 2:
        raise ValueError(f"an allreduce needs at least 2 workers' buffers, got {len(buffers)}")
    shape = buffers[0].shape
    if any(b.shape != shape for b in buffers) or buffers[0].dim() != 1:
        raise ValueError(f"buffers must be 1-D and of one shape, got {[tuple(b.shape) for b in buffers]}")


def simulate_naive_allreduce(buffers: list[torch.Tensor]) -> tuple[list[torch.Tensor], Trace]:
    """Every worker sends its whole buffer to worker 0, which adds them up and sends the sum back:
    2(n-1) messages through worker 0, which sends (n-1)·S bytes; the others send S each."""
    _check_buffers(buffers)
    n, size = len(buffers), buffers[0].numel() * buffers[0].element_size()
    out = [b.clone() for b in buffers]
    trace = Trace(n, 1, [[[(w,)] for w in range(n)]], [0] * n)
    held = [(w,) for w in range(n)]
    for src in range(1, n):  # gather: one message into worker 0 per step
        out[0] += out[src]
        trace.bytes_sent[src] += size
        held[0] = tuple(sorted(held[0] + (src,)))
        trace.holdings.append([[h] for h in held])
    for dst in range(1, n):  # broadcast: one message out of worker 0 per step
        out[dst] = out[0].clone()
        trace.bytes_sent[0] += size
        held[dst] = held[0]
        trace.holdings.append([[h] for h in held])
    return out, trace


def simulate_ring_allreduce(buffers: list[torch.Tensor]) -> tuple[list[torch.Tensor], Trace]:
    """Reduce-scatter, then all-gather, around a ring: each buffer is cut into n chunks; in each of
    n-1 steps every worker sends one chunk to the next and adds the one it receives, after which
    worker i holds the full sum of chunk (i+1) mod n; n-1 more steps pass the sums on. Each worker
    sends 2(n-1) chunks of S/n bytes: 2(n-1)/n·S, whatever n."""
    _check_buffers(buffers)
    n = len(buffers)
    if buffers[0].numel() % n:
        raise ValueError(f"the ring cuts each buffer into {n} equal chunks: {buffers[0].numel()} elements do not")
    chunks = [list(b.clone().chunk(n)) for b in buffers]
    held = [[(w,) for _ in range(n)] for w in range(n)]
    trace = Trace(n, n, [[list(r) for r in held]], [0] * n)
    chunk_bytes = chunks[0][0].numel() * chunks[0][0].element_size()
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            # Everyone sends at once: take the outgoing chunks before anyone changes theirs.
            sent = []
            for w in range(n):
                c = (w - s) % n if phase == "reduce-scatter" else (w + 1 - s) % n
                sent.append((w, c, chunks[w][c].clone(), held[w][c]))
            for w, c, data, who in sent:
                dst = (w + 1) % n
                if phase == "reduce-scatter":
                    chunks[dst][c] = chunks[dst][c] + data
                    held[dst][c] = tuple(sorted(held[dst][c] + who))
                else:
                    chunks[dst][c] = data
                    held[dst][c] = who
                trace.bytes_sent[w] += chunk_bytes
            trace.holdings.append([list(r) for r in held])
    return [torch.cat(c) for c in chunks], trace
