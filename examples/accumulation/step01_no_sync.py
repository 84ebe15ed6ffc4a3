"""Gradient accumulation with DDP: k micro-batches per optimizer step, gradients synced once a step.

    torchrun --standalone --nproc_per_node=2 examples/accumulation/step01_no_sync.py --accumulation-steps 4

Rank 0 prints how the global batch splits, the all_reduce calls and bytes each rank made when every
micro-batch syncs, when only the last one does (forward and backward inside `no_sync()`), and when
only backward is inside it (which still syncs), and how far the accumulated gradient is from the
gradient of the whole global batch in one process.
"""

import argparse
import contextlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

STEPS = 5
LR = 0.05


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))


def global_batches(global_batch: int, device):
    """The same global batches on every rank."""
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(global_batch, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


# --8<-- [start:hook]
def count_then_allreduce(counts: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: count the call and its bytes, then do what DDP does by default
    (divide by the world size, all_reduce)."""
    counts["calls"] += 1
    counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    return allreduce_hook(None, bucket)


# --8<-- [end:hook]


def train(device, global_batch: int, k: int, wrap: str, reference: nn.Module | None = None) -> dict:
    """STEPS optimizer steps of k micro-batches each; return the hook's counts. `wrap` is what runs
    inside no_sync() for all micro-batches but the last: "nothing", "forward and backward", or
    "backward". With a reference, check every step's gradient against the reference's, trained on the
    whole global batch."""
    rank, n = dist.get_rank(), dist.get_world_size()
    model = DDP(make_model().to(device))
    counts = {"calls": 0, "bytes": 0, "max_diff": 0.0}
    model.register_comm_hook(counts, count_then_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR) if reference else None
    for x, y in global_batches(global_batch, device):
        # --8<-- [start:accumulate]
        mine = zip(x.chunk(n)[rank].chunk(k), y.chunk(n)[rank].chunk(k))  # my k micro-batches
        opt.zero_grad()
        for i, (xm, ym) in enumerate(mine):
            skip = wrap != "nothing" and i < k - 1  # all but the last micro-batch accumulate without syncing
            if wrap == "backward":  # the mistake the lesson warns about
                # --8<-- [start:backward_only]
                loss = nn.functional.mse_loss(model(xm), ym) / k  # forward outside: DDP set up this backward's sync
                with model.no_sync() if skip else contextlib.nullcontext():
                    loss.backward()  # all_reduces all the same
                # --8<-- [end:backward_only]
            else:
                # --8<-- [start:no_sync]
                with model.no_sync() if skip else contextlib.nullcontext():
                    loss = nn.functional.mse_loss(model(xm), ym) / k  # the mean over my k micro-batches
                    loss.backward()  # adds into .grad; all_reduces only when it syncs
                # --8<-- [end:no_sync]
        opt.step()
        # --8<-- [end:accumulate]
        if reference is not None:
            ref_opt.zero_grad()
            nn.functional.mse_loss(reference(x), y).backward()  # one process, the whole global batch
            for p, q in zip(model.parameters(), reference.parameters()):
                counts["max_diff"] = max(counts["max_diff"], (p.grad - q.grad).abs().max().item())
                # float32 defaults (rtol 1.3e-6, atol 1e-5): the same terms, summed in another order.
                torch.testing.assert_close(p.grad, q.grad)
            ref_opt.step()
    return counts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--global-batch", type=int, default=64, help="samples per optimizer step, all ranks")
    parser.add_argument("--accumulation-steps", type=int, default=4, help="micro-batches per optimizer step")
    args = parser.parse_args()
    n, k = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE)), args.accumulation_steps
    if k < 1:
        usage_error(f"--accumulation-steps must be at least 1, got {k}")
    if args.global_batch < 1 or args.global_batch % (k * n):
        usage_error(f"--global-batch {args.global_batch} must divide into {k} micro-batches on each of {n} ranks")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    n, k = dist.get_world_size(), args.accumulation_steps
    micro = args.global_batch // (k * n)

    synced = train(device, args.global_batch, k, wrap="nothing")
    accumulated = train(device, args.global_batch, k, wrap="forward and backward", reference=make_model().to(device))
    backward_only = train(device, args.global_batch, k, wrap="backward")

    log(f"global batch {args.global_batch} = micro-batch {micro} x accumulation steps {k} x ranks {n}")
    log(
        f"all_reduce calls per rank in {STEPS} steps: {synced['calls']} syncing every micro-batch, "
        f"{accumulated['calls']} with no_sync"
    )
    log(f"only backward inside no_sync: {backward_only['calls']} calls, every micro-batch still synced")
    log(f"bytes all_reduced per rank: {synced['bytes']} vs {accumulated['bytes']}")
    log(f"max |accumulated gradient - one process, whole global batch| = {accumulated['max_diff']:.0e}")
    # The hook counted the calls: syncing only the last micro-batch makes k times fewer, as large; with
    # forward outside no_sync(), DDP had already prepared each backward's sync, and nothing is saved.
    assert synced["calls"] == k * accumulated["calls"] and synced["bytes"] == k * accumulated["bytes"]
    assert backward_only["calls"] == synced["calls"] and backward_only["bytes"] == synced["bytes"]
    log("self-check passed")


# --8<-- [start:setup]
def main() -> None:
    args = parse_args()  # before any process group: a bad flag stops every rank at once, exit code 2
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        if device.index >= torch.cuda.device_count():  # more processes than GPUs: nccl cannot share one
            sys.exit(
                f"error: local rank {device.index} has no GPU (this node has {torch.cuda.device_count()}); launch one "
                f"process per GPU, or run on the CPU: CUDA_VISIBLE_DEVICES= torchrun --standalone "
                f"--nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
            )
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(args, device)  # the work, in a function: what it builds is freed when it returns
    finally:
        dist.destroy_process_group()  # also when run() raises


if __name__ == "__main__":
    main()
# --8<-- [end:setup]
