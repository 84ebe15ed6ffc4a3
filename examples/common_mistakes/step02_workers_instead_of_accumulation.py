"""Mistake: a sync-bound training loop given more workers. Each step's gradient sync costs more than
the computation a second rank takes over, so two ranks gain little or lose. Fix: accumulate
micro-batches under no_sync() and sync once per step.

    torchrun --standalone --nproc_per_node=2 examples/common_mistakes/step02_workers_instead_of_accumulation.py

Rank 0 prints samples/s of one process and of two DDP ranks, syncing every micro-batch and every 8,
with the bytes synced counted. The rates depend on the machine; the bytes do not.
"""

import contextlib
import datetime
import gc
import os
import platform
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 1024  # 4 layers of 1024 x 1024: 16 MiB of gradients, and little work per sample
MICRO_BATCH = 8  # samples per rank per micro-batch
STEPS = 4  # optimizer steps, after one untimed step
K = 8  # micro-batches per optimizer step when accumulating


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])


def count_then_allreduce(counts: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: count the bytes, then all_reduce as DDP does by default."""
    counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return allreduce_hook(None, bucket)


def train(model: nn.Module, k: int, sync_every_micro_batch: bool) -> float:
    """STEPS optimizer steps of k micro-batches each, after one untimed step; return the seconds."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(MICRO_BATCH, WIDTH, generator=torch.Generator().manual_seed(dist.get_rank()))
    for step in range(STEPS + 1):
        if step == 1:
            start = time.perf_counter()
        # --8<-- [start:accumulate]
        for i in range(k):
            last = i == k - 1
            # The mistake syncs after every micro-batch; the fix only after the last of each step.
            skip = not (last or sync_every_micro_batch) and isinstance(model, DDP)
            with model.no_sync() if skip else contextlib.nullcontext():
                model(x).square().mean().backward()
            if sync_every_micro_batch or last:
                opt.step()
                opt.zero_grad()
        # --8<-- [end:accumulate]
    return time.perf_counter() - start


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; samples/s vary by machine and load")
    samples = STEPS * K * MICRO_BATCH  # per rank, in the timed steps of every case
    synced = {}
    for case, every in (("mistake: sync every micro-batch", True), ("fix: sync every 8 micro-batches", False)):
        one_s = slowest(train(make_model(), K, every) if rank == 0 else 0.0)  # one process; the others wait
        model = DDP(make_model())
        counts = {"bytes": 0}
        model.register_comm_hook(counts, count_then_allreduce)
        dist.barrier()
        two_s = slowest(train(model, K, every))
        synced[every] = counts["bytes"]
        log(
            f"{case}: 1 process {samples / one_s:,.0f} samples/s, {world} ranks {world * samples / two_s:,.0f} "
            f"({world * one_s / two_s:.2f}x), {synced[every]:,} bytes synced"
        )
        del model
    # --8<-- [start:self_check]
    gradient_bytes = sum(p.numel() * p.element_size() for p in make_model().parameters())
    # Every sync moves every gradient byte once: a sync per micro-batch, or one per optimizer step.
    assert synced[True] == (STEPS + 1) * K * gradient_bytes, synced
    assert synced[False] == (STEPS + 1) * gradient_bytes, synced
    log(f"accumulating {K} micro-batches synced {K}x fewer bytes for the same samples")
    log("self-check passed")
    # --8<-- [end:self_check]


# --8<-- [start:setup]
def main() -> None:
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node=2 {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        torch.cuda.set_device(device)
    # A rank that stops answering fails the others after 60 s, not after gloo's default 30 minutes.
    dist.init_process_group(backend, timeout=timedelta(seconds=60))
    try:
        run(device)  # the work, in a function: its models are garbage once it returns
    finally:
        gc.collect()  # free models caught in reference cycles now: freed at exit, they can abort it
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Done: leave without Python's shutdown. torch can keep the group's worker threads alive past
    # destroy_process_group, and one that frees a tensor while the interpreter shuts down aborts it.
    sys.stdout.flush()
    os._exit(0)
# --8<-- [end:setup]
