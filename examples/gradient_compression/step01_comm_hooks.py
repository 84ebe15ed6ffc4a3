"""Gradient compression in DDP: torch's communication hooks, and the bytes each one allreduces.

    torchrun --standalone --nproc_per_node=2 examples/gradient_compression/step01_comm_hooks.py

Rank 0 prints, for no compression, fp16, bf16 and PowerSGD at ranks 1 and 4, the bytes allreduced per
step, counted by a wrapping hook, and the loss after the same steps on the same data.
"""

import argparse
import math
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

STEPS = 40
BATCH_PER_RANK = 32
WIDTH = 256
HOOKS = ("none", "fp16", "bf16", "powersgd rank 1", "powersgd rank 4")


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank, and for every hook
    return nn.Sequential(nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))


# --8<-- [start:hooks]
def make_hook(name: str):
    """(state, hook) for register_comm_hook: each averages the bucket over the ranks, in its own way."""
    if name == "none":  # what DDP does without a hook: one float32 allreduce per bucket
        return None, default_hooks.allreduce_hook
    if name in ("fp16", "bf16"):  # cast to 16 bits, allreduce half the bytes, cast back
        return None, getattr(default_hooks, f"{name}_compress_hook")
    state = powerSGD_hook.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=int(name.split()[-1]),  # each n x m gradient sent as (n + m) x rank
        start_powerSGD_iter=2,  # plain allreduce first; error feedback (the default) needs 2 or more
    )
    return state, powerSGD_hook.powerSGD_hook


# --8<-- [end:hooks]


# --8<-- [start:count]
def counted(hook, counts: dict):
    """`hook`, counting the bytes of every all_reduce it starts (PowerSGD starts some from callbacks).
    DDP refuses bf16_compress_hook by name unless it has NCCL: under this wrapper's name it also runs
    on gloo, which reduces bfloat16 on the CPU."""

    def counting_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return hook(state, bucket)

    real_all_reduce = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        counts["bytes"] += tensor.numel() * tensor.element_size()
        return real_all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce  # the hooks call dist.all_reduce; the restore is in train()'s finally
    return counting_hook, real_all_reduce


# --8<-- [end:count]


def expected_bytes(model: nn.Module, name: str) -> int:
    """The bytes per step from the shapes alone, as the hooks decide them."""
    if name == "none":
        return sum(p.numel() * 4 for p in model.parameters())
    if name in ("fp16", "bf16"):
        return sum(p.numel() * 2 for p in model.parameters())
    rank, sent = int(name.split()[-1]), 0
    for p in model.parameters():
        n, m = p.shape[0], math.prod(p.shape[1:])
        compress = p.dim() > 1 and (n + m) * rank * 2 < n * m  # PowerSGD's min_compression_rate=2
        sent += (n + m) * rank if compress else p.numel()  # vectors and small matrices go whole
    return sent * 4


def batch(device):
    g = torch.Generator().manual_seed(1)
    target_map = torch.randn(WIDTH, WIDTH, generator=g) / math.sqrt(WIDTH)
    x = torch.randn(BATCH_PER_RANK, WIDTH, generator=g.manual_seed(2 + dist.get_rank()))  # each rank its own
    return x.to(device), (x @ target_map.T).to(device)


def reference(device) -> nn.Module:
    """One process, every rank's batch at once, no hook: what "none" must equal."""
    model = make_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = batch(device)
    xs = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    ys = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(xs, x)
    dist.all_gather(ys, y)
    for _ in range(STEPS):
        nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
        opt.zero_grad()
    return model


def train(device, name: str) -> tuple[nn.Module, int, float]:
    """STEPS steps under hook `name`; the model, the bytes of the last step's all_reduces and the loss."""
    # One bucket: with several, PowerSGD's callbacks can start one bucket's allreduces while the
    # backward pass starts the next bucket's, in a different order on each rank.
    net = make_model().to(device)
    model = DDP(net, bucket_cap_mb=sum(p.numel() * 4 for p in net.parameters()) / 2**20 + 1)
    counts = {"bytes": 0}
    state, hook = make_hook(name)
    hook, real_all_reduce = counted(hook, counts)
    try:
        model.register_comm_hook(state, hook)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = batch(device)
        for _ in range(STEPS):
            counts["bytes"] = 0
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        dist.all_reduce = real_all_reduce
    loss = loss.detach().reshape(1)
    dist.all_reduce(loss)  # the mean over every rank's batch
    return model.module, counts["bytes"], loss.item() / dist.get_world_size()


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    log(f"{'hook':>16} {'bytes/step':>10} {'smaller':>7} {'loss after ' + str(STEPS) + ' steps':>19}")
    for name in HOOKS:
        model, sent, loss = train(device, name)
        full = expected_bytes(model, "none")
        log(f"{name:>16} {sent:>10} {full / sent:>6.1f}x {loss:>19.4f}")
        # What holds on any machine: the count is the arithmetic, and every rank holds the same weights.
        assert sent == expected_bytes(model, name), (name, sent, expected_bytes(model, name))
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        copies = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(copies, flat)
        assert all(torch.equal(c, flat) for c in copies), f"{name}: the replicas differ"
        if name == "none":
            expected = reference(device)
            for p, q in zip(model.parameters(), expected.parameters()):
                # The same mean gradient, summed in another order: Adam divides by each gradient's running
                # RMS, so those rounding differences move the weights by up to a few 1e-6 in 40 steps,
                # against changes of up to 40 x lr = 0.04. A wrong average would miss by far more.
                torch.testing.assert_close(p, q, rtol=0, atol=1e-5)
    log("self-check passed")


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
