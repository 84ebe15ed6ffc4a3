"""Why the examples end with os._exit(0): in torch 2.13, importing torch.distributed.nn after
init_process_group (creating an optimizer does) captures the group in default arguments, so
destroy_process_group leaves gloo's worker threads running. Rank 0 prints the threads left after
destroy; with --early, the import comes first and none are left."""

import os
import sys
from datetime import timedelta

import torch.distributed as dist

if "--early" in sys.argv:
    import torch.distributed.nn  # noqa: F401

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
import torch.distributed.nn  # noqa: E402, F401

dist.destroy_process_group()
threads = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
if rank == 0:
    print(f"threads after destroy: {threads}", flush=True)
sys.stdout.flush()
os._exit(0)
