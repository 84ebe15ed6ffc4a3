"""A ring allreduce built from send and recv, checked against dist.all_reduce.

Launch (2 processes on the CPU, gloo; 4 shows the cost formula at work):

    torchrun --standalone --nproc_per_node=2 examples/collectives/step02_ring_allreduce.py

Every rank sums a 4 MB float32 tensor with distdocs.collectives.ring_allreduce and with gloo's
all_reduce. Rank 0 prints how many steps and bytes each rank sent, next to the formulas 2(n-1) and
2(n-1)/n * S, and the largest difference from gloo. The self-check asserts both formulas exactly and
the difference within the bound for two summation orders.
"""

import torch
import torch.distributed as dist

from distdocs.collectives import ring_allreduce
from distdocs.runtime import distributed, print0

NUMEL = 1 << 20  # 4 MB of float32
UNIT_ROUNDOFF = 2.0**-24  # float32


def main() -> None:
    with distributed(seed=0) as rt:
        n = rt.world_size
        g = torch.Generator().manual_seed(rt.rank)  # different data on every rank
        x = torch.randn(NUMEL, generator=g).to(rt.device)

        # --8<-- [start:use]
        ours, theirs, stats = x.clone(), x.clone(), {}
        ring_allreduce(ours, stats=stats)
        dist.all_reduce(theirs)
        # --8<-- [end:use]

        size = x.numel() * x.element_size()
        formula = 2 * (n - 1) * size // n if size % n == 0 else None
        print0(f"world size {n}, tensor of {size} bytes")
        print0(f"steps per rank:      {stats.get('steps', 0)}  (formula 2(n-1) = {2 * (n - 1)})")
        print0(f"bytes sent per rank: {stats.get('bytes_sent', 0)}  (formula 2(n-1)/n * S = {formula})")
        diff = (ours - theirs).abs().max().item()
        print0(f"max |ring - all_reduce| = {diff:.1e}")
        assert stats.get("steps", 0) == 2 * (n - 1) and stats.get("bytes_sent", 0) == formula
        # Each order of summing n numbers errs by at most (n-1)·u·Σ|x|: the two may differ by twice that.
        magnitude = x.abs().double()
        dist.all_reduce(magnitude)
        assert bool(((ours - theirs).abs().double() <= 2 * (n - 1) * UNIT_ROUNDOFF * magnitude).all())
        print0("self-check passed")


if __name__ == "__main__":
    main()
