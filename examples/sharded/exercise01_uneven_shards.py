"""Exercise solution: which rows of each parameter FSDP2 leaves on each rank, when they do not divide evenly.

    torchrun --standalone --nproc_per_node=2 examples/sharded/exercise01_uneven_shards.py

Rank 0 prints each parameter's rows on every rank, and checks that the shards put back together
are the whole parameter.
"""

import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(16, 5), nn.Tanh(), nn.Linear(5, 3))  # 5 and 3 rows: not even


def run(device: torch.device) -> None:
    n = dist.get_world_size()
    whole = {name: p.detach().clone() for name, p in make_model().named_parameters()}
    model = make_model().to(device)
    fully_shard(model, mesh=init_device_mesh(device.type, (n,)))

    # --8<-- [start:shards]
    mine = {name: p.to_local().detach().cpu() for name, p in model.named_parameters()}  # my rows only
    every = [None] * n
    dist.all_gather_object(every, mine)
    for name, full in whole.items():
        rows = [shards[name].shape[0] for shards in every]
        log(f"{name:>8} {tuple(full.shape)!s:>8}: rows on each rank {rows}")
        # dim 0 is cut as torch.chunk cuts it: ceil(rows / n) each, the last ranks get what is left
        assert rows == [len(c) for c in full.chunk(n)] + [0] * (n - len(full.chunk(n)))
        assert torch.equal(torch.cat([shards[name] for shards in every]), full)  # nothing lost or repeated
    # --8<-- [end:shards]
    log("self-check passed")


# --8<-- [start:setup]
def main() -> None:
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node=2 {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        torch.cuda.set_device(device)
    # A rank that stops answering fails the others after 60 s, not after gloo's default 30 minutes.
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        run(device)  # the work, in a function: its models are garbage once it returns
    finally:
        gc.collect()  # free models caught in reference cycles now: freed at exit, they can abort it
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Done: leave without Python's shutdown. torch can keep the group's worker threads alive past
    # destroy_process_group, and one that frees a tensor while the interpreter shuts down aborts it.
    sys.stdout.flush()
    os._exit(0)
# --8<-- [end:setup]
