"""Two forward passes before one backward under DDP (a GAN's discriminator on real and fake batches,
two views of a contrastive loss), with BatchNorm's running statistics, which DDP sends from rank 0
to every rank at the start of each forward, by default.

    torchrun --standalone --nproc_per_node=2 examples/convert/step06_two_forwards.py

Rank 0 prints whether the ranks' running statistics agree as each forward starts, with the buffer
sync and without it; that two forwards and one backward give the gradient one process computes; and
the error an in-place activation causes, with the forward operation anomaly detection names.
"""

import argparse
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

BATCH = 8  # samples per rank in each of the two forwards


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model(inplace_activation: bool = False) -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    # Tanh keeps its output for backward; an in-place ReLU after it overwrites that output.
    return nn.Sequential(
        nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Tanh(), nn.ReLU(inplace=inplace_activation), nn.Linear(32, 1)
    )


def two_batches(rank: int, device: torch.device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1 + rank)  # each rank's own data: its statistics differ from the others'
    return [(torch.randn(BATCH, 16, generator=g) + rank).to(device) for _ in range(2)]


def buffers_agree_at_each_forward(device: torch.device, **ddp_options) -> bool:
    """Run two forwards; at the start of each, gather every rank's running mean and compare."""
    inner = make_model().to(device)
    model = DDP(inner, **ddp_options)
    seen = []
    # A pre-hook on the wrapped module runs after DDP's own pre-forward work, the buffer sync among it.
    inner.register_forward_pre_hook(lambda module, args: seen.append(module[1].running_mean.clone()))
    for x in two_batches(dist.get_rank(), device):
        model(x)
    agree = True
    for mean in seen:
        everyone = [torch.empty_like(mean) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mean)
        agree &= all(torch.equal(everyone[0], m) for m in everyone)
    return agree


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:buffers]
    synced = buffers_agree_at_each_forward(device)  # the default: rank 0's buffers, sent at every forward
    local = buffers_agree_at_each_forward(device, forward_sync_buffers=False)  # each rank keeps its own
    # --8<-- [end:buffers]
    log(f"running statistics equal on every rank as each forward starts: {synced} by default, {local} without the sync")

    # --8<-- [start:two_forwards]
    model = DDP(make_model().to(device))
    real, fake = two_batches(rank, device)
    loss = model(real).mean() - model(fake).mean()  # two forwards, each syncing the buffers first
    loss.backward()  # one backward: the all_reduce averages the gradient of both
    # --8<-- [end:two_forwards]
    # One process: each rank's two forwards on a model with that rank's statistics, the gradients averaged.
    reference = make_model().to(device)
    grads = []
    for r in range(world_size):
        state = {k: v.clone() for k, v in reference.state_dict().items()}  # the same start for every share
        real_r, fake_r = two_batches(r, device)
        reference.zero_grad()
        (reference(real_r).mean() - reference(fake_r).mean()).backward()
        grads.append([p.grad.clone() for p in reference.parameters()])
        reference.load_state_dict(state)
    diff = 0.0
    for p, *shares in zip(model.parameters(), *grads):
        expected = torch.stack(shares).mean(0)
        diff = max(diff, (p.grad - expected).abs().max().item())
        torch.testing.assert_close(p.grad, expected)  # float32's defaults: the same terms, another order
    log(f"two forwards, one backward: max |DDP gradient - one process| = {diff:.0e}")

    # --8<-- [start:inplace]
    model = DDP(make_model(inplace_activation=True).to(device))
    with torch.autograd.set_detect_anomaly(True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # anomaly detection warns with the forward call that made the failing op
        loss = model(real).mean() - model(fake).mean()
        try:
            loss.backward()
            error = ""
        except RuntimeError as e:
            error = str(e)
    # --8<-- [end:inplace]
    # The warning's first line names the backward op, and its last lines the forward call that made it.
    named = [str(w.message).splitlines() for w in caught if "Error detected in" in str(w.message)][0]
    made_by = named[-2].strip()  # the last line of the forward's traceback: torch's own tanh call
    log(f"RuntimeError: {error.split('. Hint')[0]}.")
    log(f"anomaly detection: {named[0].split('. ')[0]}, made in forward by: {made_by}")

    # --8<-- [start:self_check]
    assert synced and not local, "DDP's default sends rank 0's buffers at every forward, and only then"
    assert "modified by an inplace operation" in error and "TanhBackward0" in named[0] and "tanh" in made_by
    log("self-check passed")
    # --8<-- [end:self_check]


# --8<-- [start:setup]
def main() -> None:
    args = parse_args()  # before any process group: a bad flag stops every rank at once, exit code 2
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        if device.index >= torch.cuda.device_count():  # more processes than GPUs: nccl cannot share one
            sys.exit(
                f"error: local rank {device.index} has no GPU (this node has {torch.cuda.device_count()}); launch one "
                f"process per GPU, or run on the CPU: CUDA_VISIBLE_DEVICES= torchrun --standalone "
                f"--nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
            )
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(args, device)  # the work, in a function: what it builds is freed when it returns
    finally:
        dist.destroy_process_group()  # also when run() raises


if __name__ == "__main__":
    main()
# --8<-- [end:setup]
