"""DDP from scratch: gradient buckets and an asynchronous all_reduce per bucket that overlaps with
backward, checked against torch's DistributedDataParallel.

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step03_ddp_from_scratch.py

BucketedDDP is the one piece this file imports: distdocs.training.ddp, the code the page builds; outside this
repository, install it with `pip install -e .` in a clone of the repository. Rank 0 prints the
buckets and how far BucketedDDP's weights are from torch DDP's after the same training.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from distdocs.training.ddp import BucketedDDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

BUCKET_CAP_MB = 0.25  # small, so that this small model still gets several buckets
STEPS = 20


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def train(model: nn.Module, device: torch.device) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(dist.get_rank())  # each rank its own data
    for _ in range(STEPS):
        x, y = torch.randn(32, 64, generator=g).to(device), torch.randint(0, 10, (32,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # the buckets are all_reduced during this call
        opt.step()


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    world_size = dist.get_world_size()
    # --8<-- [start:use]
    ours = BucketedDDP(make_model().to(device), bucket_cap_mb=BUCKET_CAP_MB)
    theirs = DDP(make_model().to(device), bucket_cap_mb=BUCKET_CAP_MB)
    train(ours, device)
    train(theirs, device)
    # --8<-- [end:use]

    sizes = [sum(p.numel() for p in b) for b in ours.buckets]
    log(f"world size {world_size}: {len(sizes)} buckets of {sizes} parameters, last layers first")
    pairs = list(zip(ours.module.parameters(), theirs.module.parameters()))
    diff = max((a - b).abs().max().item() for a, b in pairs)
    log(f"max |from-scratch DDP - torch DDP| after {STEPS} steps = {diff:.0e}")
    for a, b in pairs:
        torch.testing.assert_close(a, b)  # float32 defaults: more than 2 ranks sum in other orders
    if world_size == 2:  # both compute g0/2 + g1/2, and two numbers add in one order only
        same = all(torch.equal(a, b) for a, b in pairs)
        log(f"bitwise equal to torch DDP: {same}")
        assert same
    # All replicas must hold the same weights, or data parallelism has failed.
    checksum = torch.stack([p.detach().double().sum() for p in ours.module.parameters()]).sum()
    everyone = [torch.zeros_like(checksum) for _ in range(world_size)]
    dist.all_gather(everyone, checksum)
    assert all(torch.equal(c, checksum) for c in everyone)
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
