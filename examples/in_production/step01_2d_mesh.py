"""Two-dimensional parallelism on a 2 x 2 DeviceMesh: tensor parallel inside each pair of ranks,
FSDP2 (sharded data parallel) across the pairs; the scaled-down form of a 70B model's layout.

    torchrun --standalone --nproc_per_node=4 examples/in_production/step01_2d_mesh.py

Rank 0 prints the mesh, how one weight is split, and how far the trained weights are from one
process that trained the unsplit model on the whole batch.
"""

import copy
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

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


def run(device: torch.device) -> None:
    world = dist.get_world_size()
    if world % TP or world == TP:  # one line, from one rank; every rank exits
        if dist.get_rank() == 0:
            print(
                f"error: this example needs a multiple of {TP} processes, at least {2 * TP}; got {world}",
                file=sys.stderr,
            )
        sys.exit(2)
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
        full = p.full_tensor()  # gathers over both mesh dimensions
        # float32 defaults (rtol 1.3e-6, atol 1e-5): the split sums add in another order.
        torch.testing.assert_close(full, p_ref, msg=name)
        worst = max(worst, (full - p_ref).abs().max().item())
    up = model.up.weight
    log(f"mesh {tuple(mesh.shape)} {mesh.mesh_dim_names}: ranks {mesh.mesh.tolist()}")
    log(f"up.weight {tuple(up.shape)}: placements {up.placements}, local shard {tuple(up.to_local().shape)}")
    log(f"after {STEPS} SGD steps, max |2-D mesh - one process| = {worst:.0e}")
    log("self-check passed")
    # --8<-- [end:self_check]


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
