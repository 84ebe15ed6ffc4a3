"""Sharded checkpoints with torch.distributed.checkpoint (DCP): every rank writes its own shards of an
FSDP2 model and its optimizer, and a job of another size loads them, resharded on the fly.

    torchrun --standalone --nproc_per_node=2 examples/fault_tolerance/step02_dcp_reshard.py --save ckpt-dcp && torchrun --standalone --nproc_per_node=1 examples/fault_tolerance/step02_dcp_reshard.py --load ckpt-dcp && torchrun --standalone --nproc_per_node=4 examples/fault_tolerance/step02_dcp_reshard.py --load ckpt-dcp

Saved from 2 ranks, loaded on 1 and on 4: each time rank 0 checks that the gathered weights equal
the ones saved, bit for bit.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 64  # divisible by 1, 2 and 4 ranks


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def sharded_model(device: torch.device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 4))
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def full_weights(model, opt) -> dict:
    """Every parameter whole, gathered from the shards (on every rank; only rank 0 uses them)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, opt, options=options)[0]


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--save", metavar="DIR", help="train 3 steps, then save a sharded checkpoint here")
    what.add_argument("--load", metavar="DIR", help="load the sharded checkpoint saved here")
    args = parser.parse_args()
    return args


def train_and_check(args: argparse.Namespace, device: torch.device) -> None:
    world = dist.get_world_size()
    model, opt = sharded_model(device)

    if args.save:
        for step in range(3):  # Adam, so that the optimizer state is worth saving too
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(100 * step + dist.get_rank()))
            model(x.to(device)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        # --8<-- [start:save]
        model_state, optim_state = get_state_dict(model, opt)  # this rank's shards, as DTensors
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=args.save)
        # --8<-- [end:save]
        whole = full_weights(model, opt)
        if dist.get_rank() == 0:  # the gathered weights, for the loads to compare with
            torch.save(whole, os.path.join(args.save, "full_weights.pt"))
        dist.barrier()
        shards = sorted(f for f in os.listdir(args.save) if f.endswith(".distcp"))
        log(f"saved a sharded checkpoint from {world} ranks to {args.save}/: {len(shards)} shard files and .metadata")
        loaded = args.save  # and check that it loads back at this size too
    else:
        loaded = args.load

    # --8<-- [start:load]
    model, opt = sharded_model(device)  # fresh weights, sharded for this world size
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=loaded)  # each rank reads the pieces its own shards need
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    # --8<-- [end:load]

    # --8<-- [start:self_check]
    whole = full_weights(model, opt)
    if dist.get_rank() == 0:
        saved = torch.load(os.path.join(loaded, "full_weights.pt"), weights_only=True)
        assert saved.keys() == whole.keys()
        for name in saved:
            assert torch.equal(saved[name], whole[name]), f"{name} differs after resharding"
        log(f"loaded on {world} rank{'s' if world > 1 else ''}: every weight equals the saved one, bit for bit")
        log("self-check passed")
    dist.barrier()
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
