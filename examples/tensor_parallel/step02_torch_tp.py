"""The same MLP with torch.distributed.tensor.parallel: ColwiseParallel and RowwiseParallel on a
device mesh.

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/step02_torch_tp.py

Rank 0 prints how the first layer's weight is sharded and how far the output is from one process
running the unsplit MLP.
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
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

D_MODEL = 64
D_HIDDEN = 256


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


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    torch.manual_seed(0)  # the same weights and input on every rank
    reference = MLP().to(device)
    # --8<-- [start:parallelize]
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    model = parallelize_module(copy.deepcopy(reference), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    # --8<-- [end:parallelize]
    x = torch.randn(8, D_MODEL, device=device)

    out, out_ref = model(x), reference(x)
    (out**2).mean().backward()
    (out_ref**2).mean().backward()

    # --8<-- [start:self_check]
    torch.testing.assert_close(out, out_ref)  # float32 defaults: the sum order differs
    for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), p_ref.grad, msg=name)  # gather the shards
    up = model.up.weight
    log(
        f"world size {dist.get_world_size()}: up.weight is a {type(up).__name__} with placement "
        f"{up.placements[0]}, local shard {tuple(up.to_local().shape)} of {tuple(up.shape)}"
    )
    log(f"max |torch TP - one process| = {(out - out_ref).abs().max().item():.0e}")
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
