"""DistributedDataParallel from scratch: gradient buckets, a hook per parameter, and an asynchronous
all_reduce per bucket that overlaps with the rest of backward.

    model = BucketedDDP(module, bucket_cap_mb=25)
    loss = loss_fn(model(x), y)
    loss.backward()        # buckets all_reduce as they fill; backward waits for the last at its end
    optimizer.step()

What it does, in the order torch's DDP does it:
1. At construction, broadcast rank 0's parameters and buffers, so every replica starts identical.
2. Group the parameters into buckets of about `bucket_cap_mb`, in reverse order of `parameters()`,
   because backward produces the last layers' gradients first. Each bucket owns one flat buffer.
3. When a parameter's gradient is accumulated, a hook copies it into its bucket's buffer. When a
   bucket is complete, it is divided by the world size and all_reduced with `async_op=True`, while
   autograd goes on computing earlier layers' gradients. Buckets launch strictly in bucket order, so
   every rank issues the same collectives in the same order even if its gradients arrive otherwise.
4. At the end of backward (an autograd engine callback), wait for every bucket and point each
   parameter's `.grad` at its slice of the averaged buffer.

Like torch's DDP without `find_unused_parameters`, every parameter must receive a gradient in every
backward; otherwise its bucket never launches and this raises.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed as dist
from torch import nn


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0, group=None) -> None:
        super().__init__()
        self.module, self.group = module, group
        self.world_size = dist.get_world_size(group)
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=dist.get_global_rank(group, 0) if group else 0, group=group)

        # --8<-- [start:buckets]
        params = [p for p in module.parameters() if p.requires_grad]
        cap = bucket_cap_mb * 2**20
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):  # the last layers' gradients are ready first
            if self.buckets[-1] and size + p.numel() * p.element_size() > cap:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.buffers_ = [
            torch.zeros(sum(p.numel() for p in b), dtype=b[0].dtype, device=b[0].device) for b in self.buckets
        ]
        self.views: dict[nn.Parameter, tuple[int, torch.Tensor]] = {}
        for i, (bucket, flat) in enumerate(zip(self.buckets, self.buffers_)):
            offset = 0
            for p in bucket:
                self.views[p] = (i, flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        # The parameters hold their hooks, and this wrapper holds the parameters: a hook that held the
        # wrapper (a bound method) would make a reference cycle that keeps both, and the process group,
        # alive until the garbage collector runs, or for ever (torch keeps hooks where gc can't see).
        # Each hook holds only a weak reference, and the hooks go when the wrapper does.
        grad_ready = weakref.WeakMethod(self._grad_ready)
        handles = [p.register_post_accumulate_grad_hook(lambda p: grad_ready()(p)) for p in params]
        weakref.finalize(self, _remove_hooks, handles)
        # --8<-- [end:buckets]
        self._reset()

    def _reset(self) -> None:
        self.pending = [len(b) for b in self.buckets]  # gradients still missing, per bucket
        self.works: list = []  # one async all_reduce per launched bucket, in bucket order
        self.callback_queued = False

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    # --8<-- [start:hooks]
    def _grad_ready(self, p: nn.Parameter) -> None:
        if not self.callback_queued:  # first gradient of this backward: sync at its end
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            self.callback_queued = True
        i, view = self.views[p]
        view.copy_(p.grad)
        self.pending[i] -= 1
        # Launch every complete bucket, but only in bucket order: all ranks must agree.
        while len(self.works) < len(self.buckets) and self.pending[len(self.works)] == 0:
            flat = self.buffers_[len(self.works)]
            flat.div_(self.world_size)  # average as sum of x/n, as torch's DDP does
            self.works.append(dist.all_reduce(flat, group=self.group, async_op=True))

    def _finish(self) -> None:
        if len(self.works) < len(self.buckets):
            missing = [i for i, n in enumerate(self.pending) if n]
            raise RuntimeError(
                f"buckets {missing} never completed: some parameters got no gradient "
                "in this backward; every parameter must be used"
            )
        for work in self.works:
            work.wait()
        for p, (_, view) in self.views.items():
            p.grad = view  # the averaged gradient, without another copy
        self._reset()

    # --8<-- [end:hooks]


def _remove_hooks(handles) -> None:
    """Unregister a BucketedDDP's gradient hooks, once the wrapper itself is gone."""
    for handle in handles:
        handle.remove()
