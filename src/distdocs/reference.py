"""The small training task the lesson examples share, and the single-process reference that each
example checks its distributed result against.

A batch is given as a list of shards, one per rank: `[(x0, y0), (x1, y1)]`. The reference trains one
process on those same samples, either on the whole batch at once (what data parallelism promises to
equal) or by averaging the shards' gradients in rank order (what the ranks actually compute).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn
from torch.utils.data import TensorDataset

from distdocs.runtime import print0

IN_FEATURES = 16
HIDDEN = 32

Shard = tuple[torch.Tensor, torch.Tensor]


def make_regression_data(
    num_samples: int = 1024, seed: int = 0, dtype: torch.dtype = torch.float32
) -> TensorDataset:
    """A noisy nonlinear regression problem, identical on every rank that passes the same seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, IN_FEATURES, generator=g, dtype=torch.float64)
    w = torch.randn(IN_FEATURES, 1, generator=g, dtype=torch.float64) / IN_FEATURES**0.5
    y = torch.sin(x @ w) + 0.1 * torch.randn(num_samples, 1, generator=g, dtype=torch.float64)
    return TensorDataset(x.to(dtype), y.to(dtype))


def make_model(seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A two-layer MLP whose weights depend only on `seed`: every rank builds the same one."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for p in model.parameters():
            # Same scale as nn.Linear's default init, drawn from our own generator.
            bound = 1.0 / (p.shape[-1] ** 0.5) if p.dim() > 1 else 1.0 / (HIDDEN**0.5)
            p.copy_(torch.empty(p.shape, dtype=torch.float64).uniform_(-bound, bound, generator=g))
    return model.to(dtype)


def train_reference(
    model: nn.Module,
    batches: Iterable[Sequence[Shard]],
    *,
    lr: float,
    momentum: float,
    average_shards: bool = False,
) -> list[float]:
    """Train `model` in one process with SGD on the given sharded batches; return the loss per step.

    `average_shards=False`: one forward and backward on the whole batch (all shards concatenated).
    `average_shards=True`: one backward per shard, gradients summed in shard order and divided by the
    number of shards, the same arithmetic as `all_reduce(SUM)` followed by `/ world_size`.
    """
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses = []
    for shards in batches:
        opt.zero_grad()
        if average_shards:
            total = [torch.zeros_like(p) for p in model.parameters()]
            loss_sum = 0.0
            for x, y in shards:
                model.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                loss_sum += loss.item()
                for t, p in zip(total, model.parameters()):
                    t += p.grad
            for t, p in zip(total, model.parameters()):
                p.grad = t / len(shards)
            losses.append(loss_sum / len(shards))
        else:
            x = torch.cat([x for x, _ in shards])
            y = torch.cat([y for _, y in shards])
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            losses.append(loss.item())
        opt.step()
    return losses


def max_abs_diff(a: nn.Module, b: nn.Module) -> float:
    """The largest absolute difference between matching parameters of two models."""
    return max((pa - pb).abs().max().item() for pa, pb in zip(a.parameters(), b.parameters()))


# --8<-- [start:check]
def check_against_reference(
    model: nn.Module, batches: list[Sequence[Shard]], *, seed: int, lr: float, momentum: float
) -> None:
    """Assert that a data-parallel `model` equals one process trained on the same `batches`
    (starting from `make_model(seed)`), and print the evidence on rank 0."""
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    world_size = len(batches[0])
    full = make_model(seed, dtype).to(device)
    losses = train_reference(full, batches, lr=lr, momentum=momentum)
    print0(f"world size {world_size}, {dtype}, {len(batches)} steps")
    print0(f"one-process loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f}")
    print0(f"max |data-parallel - one process, full batch| = {max_abs_diff(model, full):.1e}")
    # The default tolerances of assert_close for this dtype (float32: rtol 1.3e-6, atol 1e-5;
    # float64: rtol 1e-7, atol 1e-7). The ranks add the same numbers in another order than the
    # full-batch mean does, so the last bits differ, by a few units of rounding per step.
    for p, q in zip(model.parameters(), full.parameters()):
        torch.testing.assert_close(p, q)
    if world_size == 2:
        # Two numbers can be added in only one order: reproduce the ranks' arithmetic, get their bits.
        averaged = make_model(seed, dtype).to(device)
        train_reference(averaged, batches, lr=lr, momentum=momentum, average_shards=True)
        same = all(torch.equal(p, q) for p, q in zip(model.parameters(), averaged.parameters()))
        print0(f"bitwise equal to one process that averages the 2 shards' gradients: {same}")
        assert same, "at world size 2 the result must be bitwise equal to averaging the shards"
    print0("self-check passed")
# --8<-- [end:check]
