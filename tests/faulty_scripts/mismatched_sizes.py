"""Rank 0 all_reduces 1 element, rank 1 four: the debugging guide says that with mismatched sizes the
smaller collective can complete, with a number nobody asked for. Rank 0 prints what it got."""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=20))
try:
    x = torch.ones(1) if dist.get_rank() == 0 else torch.arange(2.0, 6.0)
    dist.all_reduce(x)
    print(f"rank {dist.get_rank()} completed with {x.tolist()}", flush=True)
finally:
    dist.destroy_process_group()
