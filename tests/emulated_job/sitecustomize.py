"""Test side, loaded into every rank of a reader's script (PYTHONPATH, as the exit probe is): its ranks
become emulated accelerators on a dialled link, so that a test knows the compute and the sync the
script's own timers must find. Every module DDP wraps waits EMULATED_COMPUTE_S a micro-batch, a third
in forward and two thirds at the start of backward (so its gradients, and DDP's one bucket, are ready
only at backward's end); DDP's buckets and the script's own dist.all_reduce of a float tensor run the
lesson's ring over the ranks' emulated link (distdocs.lab.wire) at EMULATED_LINK. Then it loads the exit
probe, which this file shadows."""

import os
import runpy
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from distdocs.lab.wire import Lane, LinkSpec, Wire, ring_hook
from distdocs.training.collectives import ring_allreduce

COMPUTE_S = float(os.environ["EMULATED_COMPUTE_S"])
LINK = os.environ["EMULATED_LINK"]
_lanes: list[Lane] = []


def _lane() -> Lane:
    if not _lanes:
        _lanes.append(Lane(dist.group.WORLD, Wire(LinkSpec(LINK), dist.get_rank())))
    return _lanes[0]


class _Kernel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out):
        time.sleep(COMPUTE_S / 3)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(2 * COMPUTE_S / 3)
        return grad


_ddp_init = DistributedDataParallel.__init__


def _emulated_ddp(self, module, *args, **kwargs):
    module.register_forward_hook(lambda _module, _inputs, out: _Kernel.apply(out))
    _ddp_init(self, module, *args, **kwargs)
    self.register_comm_hook(_lane(), ring_hook)


_all_reduce = dist.all_reduce


def _emulated_all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    if op == dist.ReduceOp.SUM and group is None and not async_op and tensor.is_floating_point() and tensor.numel() > 1:
        wire = _lane().wire
        wire.start()
        ring_allreduce(tensor, validate=False, wire=wire)
        return None
    return _all_reduce(tensor, op=op, group=group, async_op=async_op)


_destroy = dist.destroy_process_group


def _destroy_after_the_lane(group=None):
    for lane in _lanes:
        lane.close()
    _lanes.clear()
    return _destroy(group)


DistributedDataParallel.__init__ = _emulated_ddp
dist.all_reduce = _emulated_all_reduce
dist.destroy_process_group = _destroy_after_the_lane
runpy.run_path(str(Path(__file__).resolve().parents[2] / "docexec/exit_probe/sitecustomize.py"))
