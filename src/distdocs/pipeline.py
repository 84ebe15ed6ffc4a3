"""The pipeline lesson's shared pieces: a two-stage toy model with its data and single-process
reference, and a GPipe step by hand, used by the examples and by `distdocs bench pipeline`."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn


def make_two_stage_model(width: int = 128) -> nn.Sequential:
    """Layers 0-3 are stage 0 (rank 0), layers 4-6 stage 1 (rank 1); the same weights everywhere."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))


def stage_of(model: nn.Sequential, rank: int) -> nn.Sequential:
    return model[:4] if rank == 0 else model[4:]


def toy_batches(steps: int, batch: int, device):
    """The same regression batches on every rank: rank 0 uses x, rank 1 the targets."""
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(batch, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


def reference_stage(rank: int, device, steps: int, batch: int, lr: float, width: int = 128) -> nn.Module:
    """Train the whole model in one process with SGD on the same batches; return `rank`'s half."""
    model = make_two_stage_model(width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in toy_batches(steps, batch, device):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return stage_of(model, rank)


class BusyTimer:
    """Adds up the seconds spent computing (not waiting in send/recv)."""

    def __init__(self) -> None:
        self.busy_s = 0.0

    def __enter__(self) -> "BusyTimer":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.busy_s += time.perf_counter() - self._start


# --8<-- [start:gpipe_step]
def gpipe_step(stage: nn.Module, rank: int, x, y, m: int, width: int, timer: BusyTimer | None = None) -> None:
    """One training step's forwards and backwards for m micro-batches on a 2-stage pipeline
    (GPipe: all forwards, then all backwards). Rank 0 holds stage 0 and the inputs x; rank 1 holds
    stage 1 and the targets y; activations between the stages have `width` features."""
    busy = timer or BusyTimer()
    shape = (x.shape[0] // m, width)
    kept = []  # what each micro-batch's backward needs
    for xs, ys in zip(x.chunk(m), y.chunk(m)):  # all forwards
        if rank == 0:
            with busy:
                h = stage(xs)
            dist.send(h.detach(), dst=1)
            kept.append(h)
        else:
            h = torch.empty(shape, device=x.device)
            dist.recv(h, src=0)
            h.requires_grad_()
            with busy:
                loss = nn.functional.mse_loss(stage(h), ys) / m  # mean over the whole batch
            kept.append((h, loss))
    for item in reversed(kept):  # all backwards, last micro-batch first
        if rank == 0:
            grad = torch.empty(shape, device=x.device)
            dist.recv(grad, src=1)
            with busy:
                item.backward(grad)  # gradients add up in .grad over micro-batches
        else:
            h, loss = item
            with busy:
                loss.backward()
            dist.send(h.grad, dst=0)
# --8<-- [end:gpipe_step]
