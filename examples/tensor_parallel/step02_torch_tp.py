"""The same MLP with torch.distributed.tensor.parallel: ColwiseParallel and RowwiseParallel on a
device mesh.

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/step02_torch_tp.py

Rank 0 prints how the first layer's weight is sharded and how far the output is from one process
running the unsplit MLP.
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
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

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


def run(device: torch.device) -> None:
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
