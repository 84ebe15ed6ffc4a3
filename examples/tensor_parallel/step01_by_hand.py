"""Tensor parallelism by hand: an MLP whose first matrix is split by columns and second by rows.

Launch (2 processes on the CPU, gloo; 4 works too):

    torchrun --standalone --nproc_per_node=2 examples/tensor_parallel/step01_by_hand.py

The MLP is z = gelu(x A) B. Rank i holds the columns A_i of A and the matching rows B_i of B; it
computes gelu(x A_i) B_i, a partial z, with no communication, and one all_reduce sums the partials.
Backward needs one all_reduce too, for the input's gradient. The self-check compares the output and
every gradient with one process that holds the whole MLP.
"""

import torch
import torch.distributed as dist
from torch import nn

from distdocs.runtime import distributed, print0

D_MODEL = 64
D_HIDDEN = 256  # divisible by the world size


def main() -> None:
    with distributed(seed=0) as rt:
        n, r = rt.world_size, rt.rank
        a = torch.randn(D_MODEL, D_HIDDEN, device=rt.device) / D_MODEL**0.5  # same seed: same matrices
        b = torch.randn(D_HIDDEN, D_MODEL, device=rt.device) / D_HIDDEN**0.5
        x = torch.randn(8, D_MODEL, device=rt.device, requires_grad=True)
        cols = slice(r * D_HIDDEN // n, (r + 1) * D_HIDDEN // n)

        # --8<-- [start:forward_backward]
        a_mine = a[:, cols].clone().requires_grad_()  # column-parallel: my columns of A
        b_mine = b[cols, :].clone().requires_grad_()  # row-parallel: the matching rows of B
        z_partial = nn.functional.gelu(x @ a_mine) @ b_mine  # no communication so far
        z = z_partial.detach().clone()
        dist.all_reduce(z)  # forward: sum the partial outputs

        z.requires_grad_()
        loss = (z**2).mean()  # every rank holds the full z, so the same loss
        loss.backward()  # dloss/dz, identical on every rank
        z_partial.backward(z.grad)  # gradients of my shards, and my part of dloss/dx
        dist.all_reduce(x.grad)  # backward: sum the parts of the input's gradient
        # --8<-- [end:forward_backward]

        # --8<-- [start:self_check]
        x_ref = x.detach().clone().requires_grad_()
        a_ref, b_ref = a.clone().requires_grad_(), b.clone().requires_grad_()
        z_ref = nn.functional.gelu(x_ref @ a_ref) @ b_ref
        (z_ref**2).mean().backward()
        # assert_close at float32's defaults: the all_reduce adds n partial sums, one process adds
        # all D_HIDDEN terms in one matmul; the last bits differ.
        torch.testing.assert_close(z, z_ref)
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(a_mine.grad, a_ref.grad[:, cols])
        torch.testing.assert_close(b_mine.grad, b_ref.grad[cols, :])
        diff = max((z - z_ref).abs().max().item(), (x.grad - x_ref.grad).abs().max().item())
        print0(f"world size {n}: each rank holds {a_mine.numel() + b_mine.numel()} of "
               f"{a.numel() + b.numel()} weights")
        print0(f"max |tensor-parallel - one process| over output and input gradient = {diff:.1e}")
        print0("self-check passed")
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
