"""Two-dimensional parallelism on a 2 x 2 DeviceMesh: tensor parallel inside each pair of ranks,
FSDP2 (sharded data parallel) across the pairs; the scaled-down form of a 70B model's layout.

    torchrun --standalone --nproc_per_node=4 examples/in_production/step01_2d_mesh.py

Rank 0 prints the mesh, how one weight is split, and how far the trained weights are from one
process that trained the unsplit model on the whole batch.
"""

import argparse
import copy
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
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 4
TIMEOUT_S = 60

D_MODEL = 64
D_HIDDEN = 256
BATCH = 16  # global batch, split across the data-parallel groups
STEPS = 3
TP = 2  # tensor-parallel degree: ranks that split every layer (one node's fast links, in production)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(D_MODEL, D_HIDDEN)
        self.down = nn.Linear(D_HIDDEN, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


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


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def parse_args() -> argparse.Namespace:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    world_size = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if world_size % TP or world_size == TP:
        usage_error(f"this example needs a multiple of {TP} processes, at least {2 * TP}; got {world_size}")
    return args


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    world = dist.get_world_size()
    torch.manual_seed(0)  # the same weights and data on every rank
    reference = MLP().to(device)
    data = [torch.randn(BATCH, D_MODEL, device=device) for _ in range(STEPS)]

    # --8<-- [start:mesh]
    # Rows are data-parallel replicas, columns split each layer: ranks (0, 1) and (2, 3) are pairs.
    mesh = init_device_mesh(device.type, (world // TP, TP), mesh_dim_names=("dp", "tp"))
    model = copy.deepcopy(reference)
    parallelize_module(model, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])  # then shard what each pair holds across the replicas
    # --8<-- [end:mesh]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)

    # --8<-- [start:train]
    dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    for x in data:
        mine = x.chunk(dp_size)[dp_rank]  # a replica's share of the batch; its TP pair sees the same
        model(mine).square().mean().backward()  # FSDP averages the gradients over "dp"
        opt.step()
        opt.zero_grad()
        reference(x).square().mean().backward()  # one process, the whole batch
        opt_ref.step()
        opt_ref.zero_grad()
    # --8<-- [end:train]

    # --8<-- [start:self_check]
    worst = 0.0
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        # Gather over "dp", then over "tp": in one call, torch 2.13 warns that it cannot merge the two
        # all_gathers of a strided shard, and does the same two.
        full = p.redistribute(placements=[Replicate(), p.placements[1]]).full_tensor()
        # float32 defaults (rtol 1.3e-6, atol 1e-5): the split sums add in another order.
        torch.testing.assert_close(full, p_ref, msg=name)
        worst = max(worst, (full - p_ref).abs().max().item())
    up = model.up.weight
    log(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}: ranks {mesh.mesh.tolist()}")
    log(f"up.weight {tuple(up.shape)}: placements {up.placements}, local shard {tuple(up.to_local().shape)}")
    log(f"after {STEPS} SGD steps, max |2-D mesh - one process| = {worst:.0e}")
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
