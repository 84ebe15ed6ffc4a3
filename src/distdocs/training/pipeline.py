"""A GPipe training step by hand, for two stages on two ranks: the piece the pipeline lesson builds,
used by its example and by `distdocs bench pipeline`."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from distdocs.training.timing import wait_for_device


class BusyTimer:
    """Adds up the seconds spent computing (not waiting in send/recv), and keeps each stretch's start
    and end (`time.perf_counter()`, one clock for every process of a Linux machine). On a GPU it
    waits for the device at both ends, so it times the work, not its queueing."""

    def __init__(self) -> None:
        self.busy_s = 0.0
        self.spans: list[tuple[float, float]] = []

    def __enter__(self) -> BusyTimer:
        wait_for_device()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wait_for_device()
        end = time.perf_counter()
        self.busy_s += end - self._start
        self.spans.append((self._start, end))


def bubble_fraction(ranks: int, microbatches: int, chunks: int = 1) -> float:
    """The share of a step each rank spends idle, filling and draining the pipeline, when forward and
    backward cost the same everywhere: (p - 1) / (m + p - 1) for p ranks (one stage each) and m
    micro-batches under GPipe or 1F1B (Huang et al. 2019), and (p - 1) / (v·m + p - 1) when each rank
    holds v interleaved chunks of its layers (v·p stages), since filling then takes p - 1 steps of
    1/v of a rank's work each (Narayanan et al. 2021)."""
    if min(ranks, microbatches, chunks) < 1:
        raise ValueError(
            f"ranks, micro-batches and chunks must be at least 1, not {ranks}, {microbatches} and {chunks}"
        )
    return (ranks - 1) / (chunks * microbatches + ranks - 1)


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
