"""Mistake: a small model spread over two ranks. Each step's all_reduce outlasts the little
computation it saves, and two ranks train slower than one process. Fix: give each rank enough work.

    torchrun --standalone --nproc_per_node=2 examples/common_mistakes/step01_small_model_scaled_out.py

Rank 0 prints samples/s of one process and of two DDP ranks, with a small and a large batch per
rank. The numbers depend on the machine; the self-check asserts that DDP trained the same weights.
"""

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
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 256
STEPS = 40
BATCHES = {"mistake": 16, "fix": 2048}  # samples per rank per step


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1))


def train(model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Train on `data`; return the seconds it took."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for x, y in data:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    return time.perf_counter() - start


def slowest(seconds: float) -> float:
    """The slowest rank's time: a DDP run ends when its last rank does."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {datetime.date.today()}"
    log(f"# {machine}; samples/s vary by machine and load")
    for case, batch in BATCHES.items():
        g = torch.Generator().manual_seed(1)  # the same global batches on every rank
        steps = [(torch.randn(world * batch, WIDTH, generator=g), torch.randn(world * batch, 1, generator=g))]
        steps = steps * STEPS
        # --8<-- [start:compare]
        # One process trains on the whole global batch, while the other ranks wait.
        single = make_model()
        one_s = slowest(train(single, steps) if rank == 0 else 0.0)
        # Two ranks, each on its half: the same samples, the same gradient, plus one all_reduce a step.
        ddp = DDP(make_model())
        dist.barrier()  # start together
        two_s = slowest(train(ddp, [(x.chunk(world)[rank], y.chunk(world)[rank]) for x, y in steps]))
        # --8<-- [end:compare]
        for p, q in zip(ddp.parameters(), single.parameters() if rank == 0 else ddp.parameters()):
            # float32 defaults: the halves' gradients are averaged, not summed in one pass.
            torch.testing.assert_close(p, q, msg=f"{case}: DDP trained other weights than one process")
        samples = STEPS * world * batch
        log(
            f"{case}: {batch} samples per rank: 1 process {samples / one_s:,.0f} samples/s, "
            f"{world} ranks {samples / two_s:,.0f} samples/s ({one_s / two_s:.2f}x)"
        )
        del ddp
    log("DDP trained the same weights as one process, in both cases")
    log("self-check passed")


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
