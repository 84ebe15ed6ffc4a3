"""Succeeds, then dies at exit with SIGABRT, as a process whose C++ threads outlive the interpreter
does: the harness must count this as a failure."""

import atexit
import os
from datetime import timedelta

import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
try:
    if dist.get_rank() == 0:
        print("self-check passed", flush=True)
finally:
    dist.destroy_process_group()
atexit.register(os.abort)
