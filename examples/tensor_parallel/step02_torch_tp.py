"""The same MLP with torch.distributed.tensor.parallel: ColwiseParallel and RowwiseParallel on a
device mesh.

Launch (2 processes on the CPU, gloo):

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/step02_torch_tp.py

parallelize_module turns the two nn.Linear layers' weights into DTensors sharded like step 01's
matrices and inserts the all_reduce itself. The self-check compares the output and the gradients
with one process running the unsplit MLP.
"""

import copy

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from distdocs.runtime import distributed, print0

D_MODEL = 64
D_HIDDEN = 256


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(D_MODEL, D_HIDDEN)
        self.down = nn.Linear(D_HIDDEN, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


def main() -> None:
    with distributed(seed=0) as rt:
        reference = MLP().to(rt.device)  # same seed on every rank: the same weights
        # --8<-- [start:parallelize]
        mesh = init_device_mesh(rt.device.type, (rt.world_size,))
        model = parallelize_module(copy.deepcopy(reference), mesh,
                                   {"up": ColwiseParallel(), "down": RowwiseParallel()})
        # --8<-- [end:parallelize]
        x = torch.randn(8, D_MODEL, device=rt.device)

        out, out_ref = model(x), reference(x)
        (out**2).mean().backward()
        (out_ref**2).mean().backward()

        # --8<-- [start:self_check]
        torch.testing.assert_close(out, out_ref)  # float32 defaults: the sum order differs
        for (name, p), p_ref in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad.full_tensor(), p_ref.grad, msg=name)  # gather the shards
        up = model.up.weight
        print0(f"world size {rt.world_size}: up.weight is a {type(up).__name__} with placement "
               f"{up.placements[0]}, local shard {tuple(up.to_local().shape)} of {tuple(up.shape)}")
        print0(f"max |torch TP - one process| = {(out - out_ref).abs().max().item():.1e}")
        print0("self-check passed")
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
