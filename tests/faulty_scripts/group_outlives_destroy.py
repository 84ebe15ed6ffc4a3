"""A process group kept past destroy_process_group, as a cache would keep it: the exit probe must say
so (tests/test_normal_exit.py). Its gloo threads then race the interpreter's exit, so this script may
also abort; the test reads only the probe's line."""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
t = torch.ones(4)
dist.all_reduce(t)
CACHE = [dist.group.WORLD]  # what a library's cache does: it holds the group
dist.destroy_process_group()
print("destroyed, but still held", flush=True)
