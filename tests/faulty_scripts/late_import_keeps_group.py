"""The known torch issue on the data-parallelism page, reproduced, and the canary that says when torch
fixes it: in torch 2.13, importing torch.distributed.nn after init_process_group (creating an optimizer
does) captures the live group in default arguments, so destroy_process_group cannot free it, and gloo's
worker threads keep running. Rank 0 prints the threads left after destroy; with --early, the import
comes first and none are left.

A thread starts with its parent's name ("python") and renames itself once it first runs, so on a busy
machine a gloo thread can still be called "python" when /proc is read: the list waits (up to 10 s)
until every thread has its own name. The script leaves with os._exit(0), because the threads it keeps
would race the interpreter's shutdown, which is the bug itself; the test reads the list."""

import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

if "--early" in sys.argv:
    import torch.distributed.nn  # noqa: F401


def named_threads() -> list[str]:
    """This process's threads but the main one, by name, once each has its own."""
    deadline = time.monotonic() + 10
    while True:
        tids = [t for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
        names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in tids)
        if "python" not in names or time.monotonic() > deadline:
            return names
        time.sleep(0.05)


# --8<-- [start:repro]
dist.init_process_group("gloo", timeout=timedelta(seconds=30))
dist.barrier()  # every rank connected before any can leave: rank 0 finishing first broke rank 1's init
rank = dist.get_rank()
import torch.distributed.nn  # noqa: E402, F401  after init: its default arguments now hold the group

dist.destroy_process_group()
threads = named_threads()
if rank == 0:
    print(f"threads after destroy: {threads}", flush=True)
# --8<-- [end:repro]
sys.stdout.flush()
os._exit(0)
