"""Rank 1 raises while rank 0 waits for it in a collective: the launch must fail fast, with rank 1's
traceback, and leave nothing running."""

import torch
import torch.distributed as dist

from distdocs.runtime import distributed

with distributed() as rt:
    if rt.rank == 1:
        raise ValueError("boom from rank 1")
    dist.all_reduce(torch.ones(1))  # rank 0 blocks here until rank 1's exit breaks the connection
