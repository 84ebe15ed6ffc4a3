"""Rank 1 raises while rank 0 waits for it in a collective: the launch must fail fast, with rank 1's
traceback, and leave nothing running."""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
try:
    if dist.get_rank() == 1:
        raise ValueError("boom from rank 1")
    dist.all_reduce(torch.ones(1))  # rank 0 blocks here until rank 1's exit breaks the connection
finally:
    dist.destroy_process_group()
