"""Sharded data parallelism with FSDP2's fully_shard: each rank keeps 1/n of the parameters,
gradients and optimizer state, and gathers a layer's weights only while it computes with them.

    torchrun --standalone --nproc_per_node=2 examples/sharded/step01_fsdp.py

Rank 0 prints the bytes of parameters, gradients and Adam state each rank holds, next to torch DDP
trained in the same run on the same shards, and how far the two trained models are apart.
Try --nproc_per_node=4 and watch the shares halve.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 256  # divisible by 2 and 4, so the shards are exact
STEPS = 20
GLOBAL_BATCH = 64


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    return nn.Sequential(
        nn.Linear(32, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, 8),
    )


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 32, generator=g)
        yield x.to(device), x[:, :8].sin().to(device)


def local_bytes(tensors) -> int:
    """Bytes this rank actually stores: the local shard of a DTensor, or the whole tensor."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]
    return sum(t.numel() * t.element_size() for t in local)


def train(model, opt, device, rank, world_size):
    for x, y in batches(device):
        mine = slice(rank * GLOBAL_BATCH // world_size, (rank + 1) * GLOBAL_BATCH // world_size)
        loss = nn.functional.mse_loss(model(x[mine]), y[mine])
        opt.zero_grad()
        loss.backward()
        opt.step()


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


# --8<-- [start:release]
def release_dtensor_caches() -> None:
    """Let destroy_process_group free the process group on gloo. torch 2.13's DTensor keeps every
    DeviceMesh it has used in caches, and a mesh holds its groups; gloo cannot stop the threads of a
    group that is still held, and they race the interpreter's exit, which can abort it (the known torch
    issue on the data-parallelism page). On torch 2.13, without this, gloo threads outlived the group in
    every example that calls it, and with any one of the four caches left alone, in most of them; torch
    clears the first in its own tests for the same reason (https://github.com/pytorch/pytorch/pull/172504).
    torch 2.14.1 keeps all four, each still holding meshes. nccl stops its threads at destroy and needs
    none of this. These caches are torch internals: each is
    cleared only where this torch has it."""
    if dist.get_backend() != "gloo":
        return
    from torch.distributed.tensor import _collective_utils, _redistribute, debug

    for clear in (
        getattr(debug, "_clear_sharding_prop_cache", None),
        getattr(_collective_utils.MeshTopoInfo.build_from_mesh, "cache_clear", None),
        getattr(_redistribute, "clear_redistribute_planner_cache", None),
        getattr(getattr(_redistribute, "_gen_transform_infos", None), "cache_clear", None),
    ):
        if clear is not None:
            clear()
    gc.collect()  # what the work built can sit in reference cycles that hold the group (FSDP's modules do)


# --8<-- [end:release]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    n = dist.get_world_size()
    # --8<-- [start:shard]
    mesh = init_device_mesh(device.type, (n,))
    model = make_model().to(device)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # each Linear gathers its weights only when it runs
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # its state is sharded like the weights
    train(model, opt, device, dist.get_rank(), n)
    # --8<-- [end:shard]

    # --8<-- [start:self_check]
    ddp = DDP(make_model().to(device))  # the same training, every rank holding everything
    ddp_opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    train(ddp, ddp_opt, device, dist.get_rank(), n)

    states = lambda o: [t for s in o.state.values() for t in s.values() if t.dim() > 0]  # noqa: E731
    held = lambda m, o: [
        local_bytes(m.parameters()),
        local_bytes(p.grad for p in m.parameters()),  # noqa: E731
        local_bytes(states(o)),
    ]
    every = [None] * n
    dist.all_gather_object(every, (held(ddp, ddp_opt), held(model, opt)))
    log(f"{'bytes':>14} {'parameters':>11} {'gradients':>10} {'Adam state':>11}")
    for r, (ddp_bytes, fsdp_bytes) in enumerate(every):
        log(f"{f'DDP, rank {r}':>14} " + " ".join(f"{b:>{w}}" for b, w in zip(ddp_bytes, (11, 10, 11))))
        log(f"{f'FSDP, rank {r}':>14} " + " ".join(f"{b:>{w}}" for b, w in zip(fsdp_bytes, (11, 10, 11))))
    assert all(f * n == d for ddp_bytes, fsdp_bytes in every for f, d in zip(fsdp_bytes, ddp_bytes)), (
        "each FSDP rank should hold exactly 1/n of what a DDP rank holds"
    )
    log(f"each FSDP rank holds 1/{n} of what each DDP rank holds: True")

    diff = 0.0
    for p, q in zip(model.parameters(), ddp.module.parameters()):
        whole = p.full_tensor()  # all_gather the shards to compare with DDP's full copy
        diff = max(diff, (whole - q).abs().max().item())
        # float32 defaults (rtol 1.3e-6, atol 1e-5): FSDP reduce-scatters and DDP all_reduces
        # the same shard gradients, in different orders and chunks.
        torch.testing.assert_close(whole, q)
    log(f"max |FSDP - DDP| = {diff:.0e}")
    # Two numbers add in only one order, so at 2 ranks the reduce_scatter and the all_reduce agree.
    assert n != 2 or diff == 0.0, "at world size 2 FSDP and DDP should be bitwise equal"
    log("self-check passed")
    # --8<-- [end:self_check]


def run(args: argparse.Namespace, device: torch.device) -> None:
    train_and_check(args, device)  # what it built (models, meshes, DTensors) is freed when it returns
    release_dtensor_caches()  # so that the setup's destroy_process_group can free the group


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
