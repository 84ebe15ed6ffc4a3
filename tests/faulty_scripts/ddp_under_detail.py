"""DDP on gloo, built under TORCH_DISTRIBUTED_DEBUG=DETAIL: with torch 2.13 on the CPU, the
constructor segfaults, as the debugging guide warns."""

from datetime import timedelta

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=timedelta(seconds=20))
try:
    model = DDP(nn.Linear(4, 1))
    print("DDP built", flush=True)
    del model
finally:
    dist.destroy_process_group()
