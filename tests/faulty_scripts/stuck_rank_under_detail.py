"""A rank stuck outside torch.distributed, under TORCH_DISTRIBUTED_DEBUG=DETAIL: run with
`TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc_per_node=2`. DETAIL wraps the group so
that every collective first passes a monitored barrier; rank 1 never comes to the second all_reduce,
and at the group's 5 s timeout rank 0's barrier names it. (The debugging page's example has a 60 s
timeout; this is the same hang, shortened.)"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    try:
        t = torch.ones(4)
        dist.all_reduce(t)
        if dist.get_rank() == 1:
            time.sleep(30)  # stuck in its data loading, say: no collective, no error
        dist.all_reduce(t)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
