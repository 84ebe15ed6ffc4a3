"""Three-dimensional parallelism on one 2 x 2 x 2 DeviceMesh: pipeline stages across "pp", tensor
parallelism inside each stage across "tp", FSDP2 across "dp"; the 70B model's layout in miniature.

    torchrun --standalone --nproc_per_node=8 examples/in_production/step02_3d_mesh.py

Rank 0 prints the mesh, the groups along each of its dimensions, how one weight is split, and how far
the trained weights are from one process that trained the whole model on the whole batch.
"""

import argparse
import collections
import contextlib
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
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 8
TIMEOUT_S = 60

PP, TP = 2, 2  # pipeline stages (across nodes, in production) and tensor-parallel ranks (inside a node)
BLOCKS, D_MODEL, D_HIDDEN = 4, 64, 256  # the model: BLOCKS MLP blocks, BLOCKS / PP on each stage
BATCH, MICROBATCHES, STEPS = 16, 2, 3  # the global batch, split across "dp", then into micro-batches


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(D_MODEL, D_HIDDEN)
        self.down = nn.Linear(D_HIDDEN, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


# --8<-- [start:count]
class CollectivesByAxis(TorchDispatchMode):
    """Counts the calls this rank makes through each mesh dimension's process group, backward passes
    included: each goes through torch's dispatcher as an operation that carries its group (c10d for
    FSDP and pipelining, _c10d_functional for DTensor's tensor parallelism; a private API in 2.13)."""

    NAMES = {"allgather_base_": "all_gather", "reduce_scatter_base_": "reduce_scatter", "recv_": "recv"}

    def __init__(self, mesh) -> None:
        super().__init__()
        self.axis = {mesh.get_group(dim).group_name: dim for dim in mesh.mesh_dim_names}
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        group = None
        if func.namespace == "c10d":  # a ProcessGroup call: its group is its first ScriptObject argument
            group = next(
                (dist.ProcessGroup.unbox(a).group_name for a in args if isinstance(a, torch.ScriptObject)), None
            )
        elif func.namespace == "_c10d_functional" and args and isinstance(args[-1], str):
            group = args[-1]  # a functional collective names its group last
        if group in self.axis:
            name = func.overloadpacket.__name__.lstrip("_")
            self.counts[self.axis[group], self.NAMES.get(name, name)] += 1
        return func(*args, **(kwargs or {}))


# --8<-- [end:count]


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
    dp = world_size // (PP * TP)
    if world_size % (PP * TP):
        usage_error(f"this example needs a multiple of {PP * TP} processes (pp {PP} x tp {TP} x dp), got {world_size}")
    if BATCH % (dp * MICROBATCHES):
        usage_error(f"a batch of {BATCH} does not split into {dp} replicas x {MICROBATCHES} micro-batches")
    return args


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    world = dist.get_world_size()
    torch.manual_seed(0)  # the same weights and data on every rank
    reference = nn.Sequential(*[MLP() for _ in range(BLOCKS)]).to(device)
    data = [
        (torch.randn(BATCH, D_MODEL, device=device), torch.randn(BATCH, D_MODEL, device=device)) for _ in range(STEPS)
    ]

    # --8<-- [start:mesh]
    # pp outermost, tp innermost: the ranks of a tp group are neighbours, on one node in production.
    mesh = init_device_mesh(device.type, (PP, world // (PP * TP), TP), mesh_dim_names=("pp", "dp", "tp"))
    pp_rank = mesh["pp"].get_local_rank()
    per_stage = BLOCKS // PP
    stage_module = copy.deepcopy(reference[pp_rank * per_stage : (pp_rank + 1) * per_stage])
    for block in stage_module:  # split each block's matrices across "tp"
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    # Then shard what each rank holds across "dp", a block at a time. With a pipeline, torchtitan keeps
    # the gathered weights through the step (reshard_after_forward=False): one all_gather a block, not
    # one for each micro-batch's forward and again for the backward.
    for block in stage_module:
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)
    fully_shard(stage_module, mesh=mesh["dp"], reshard_after_forward=False)  # the schedule syncs it once
    stage = PipelineStage(stage_module, pp_rank, num_stages=PP, device=device, group=mesh["pp"].get_group())
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
    # --8<-- [end:mesh]
    opt = torch.optim.SGD(stage_module.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)

    # --8<-- [start:train]
    dp_rank, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    counter = CollectivesByAxis(mesh)
    for step, (x, y) in enumerate(data):
        mine, target = x.chunk(dp_size)[dp_rank], y.chunk(dp_size)[dp_rank]  # a replica's share of the batch
        # Count the last step: the first also sends the stages' shapes to each other.
        with counter if step == STEPS - 1 else contextlib.nullcontext():
            if pp_rank == 0:
                schedule.step(mine)  # the first stage feeds the inputs
            else:
                schedule.step(target=target)  # the last stage computes the loss; FSDP averages over "dp"
        opt.step()
        opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()  # one process, the whole model and batch
        opt_ref.step()
        opt_ref.zero_grad()
    # --8<-- [end:train]

    # --8<-- [start:self_check]
    worst = torch.zeros((), device=device)
    stage_reference = reference[pp_rank * per_stage : (pp_rank + 1) * per_stage]
    for (name, p), p_ref in zip(stage_module.named_parameters(), stage_reference.parameters()):
        # Gather over "dp", then over "tp" (inside this stage): in one call, torch 2.13 warns that it
        # cannot merge the two all_gathers of a strided shard, and does the same two.
        full = p.redistribute(placements=[Replicate(), p.placements[1]]).full_tensor()
        # float32 defaults (rtol 1.3e-6, atol 1e-5): the split sums add in another order.
        torch.testing.assert_close(full, p_ref, msg=name)
        worst = torch.maximum(worst, (full - p_ref).abs().max())
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # over both stages
    up = stage_module[0].up.weight
    log(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}: ranks {mesh.mesh.tolist()}")
    for dim in mesh.mesh_dim_names:
        groups = mesh.mesh.movedim(mesh.mesh_dim_names.index(dim), -1).reshape(-1, mesh[dim].size()).tolist()
        log(f"  {dim} groups: {groups}")
    log(f"stage 0's up.weight {tuple(up.shape)}: placements {up.placements}, local shard {tuple(up.to_local().shape)}")
    log(f"rank 0's communication in one step, {MICROBATCHES} micro-batches, by mesh dimension:")
    for dim in mesh.mesh_dim_names:
        calls = ", ".join(f"{op} x {n}" for (d, op), n in sorted(counter.counts.items()) if d == dim)
        log(f"  {dim}: {calls}")
    log(f"after {STEPS} SGD steps, max |3-D mesh - one process| = {worst.item():.0e}")
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
