"""Why the examples end with os._exit(0): in torch 2.13, importing torch.distributed.nn after
init_process_group (creating an optimizer does) captures the group in default arguments, so
destroy_process_group leaves gloo's worker threads running. Rank 0 prints the threads left after
destroy; with --early, the import comes first and none are left.

A thread starts with its parent's name ("python") and renames itself once it first runs, so on a busy
machine a gloo thread can still be called "python" when /proc is read. Rank 0 waits (up to 10 s) until
every thread but the main one has its own name, so the list it prints does not depend on the load."""

import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

if "--early" in sys.argv:
    import torch.distributed.nn  # noqa: F401

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
import torch.distributed.nn  # noqa: E402, F401

dist.destroy_process_group()


def other_threads():
    """The names of this process's threads, the main one (whose id is the process id) left out."""
    tids = [t for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in tids)


deadline = time.monotonic() + 10
while "python" in (threads := other_threads()) and time.monotonic() < deadline:
    time.sleep(0.05)
if rank == 0:
    print(f"threads after destroy: {threads}", flush=True)
sys.stdout.flush()
os._exit(0)
