"""Context parallelism: causal attention over a sequence split across ranks, with ring attention. Each
rank holds a chunk of the sequence; the key/value chunks go around the ring, and an online softmax
folds each one in as it arrives.

    torchrun --standalone --nproc_per_node=2 examples/context_parallel/step01_ring_attention.py

Rank 0 prints what each rank holds against one process with the whole sequence, and checks the
output against torch's scaled_dot_product_attention over the whole sequence. Try --nproc_per_node=4.
It imports distdocs.training.attention, which the context-parallelism page builds: `pip install -e .`.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
import torch.nn.functional as F

from distdocs.training.attention import ring_attention

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

HEADS, SEQ_LEN, HEAD_DIM = 4, 1024, 32  # SEQ_LEN divisible by the world size


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


def parse_args() -> argparse.Namespace:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    world = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if SEQ_LEN % world:
        usage_error(f"a sequence of {SEQ_LEN} tokens cannot be split evenly over {world} ranks")
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same whole sequence on every rank: each keeps its own chunk
    q, k, v = (torch.randn(HEADS, SEQ_LEN, HEAD_DIM, device=device) for _ in range(3))
    chunk = SEQ_LEN // world
    mine = slice(rank * chunk, (rank + 1) * chunk)

    # --8<-- [start:run]
    out = ring_attention(q[:, mine], k[:, mine], v[:, mine], causal=True)  # my queries, every key
    # --8<-- [end:run]

    # What grows with the sequence, per rank, against one process that holds all of it (float32).
    kib = 4 * HEADS / 1024
    log(f"{world} ranks, {SEQ_LEN} tokens, {HEADS} heads of {HEAD_DIM}:")
    log(f"  queries, keys, values: {3 * SEQ_LEN * HEAD_DIM * kib:.0f} KiB in one process, "
        f"{(chunk + 2 * 2 * chunk) * HEAD_DIM * kib:.0f} KiB per rank (its queries, two key/value chunks)")  # fmt: skip
    log(f"  a plain attention's scores: {SEQ_LEN * SEQ_LEN * kib:.0f} KiB in one process (T x T), "
        f"{chunk * chunk * kib:.0f} KiB per rank at a time (T/{world} x T/{world})")  # fmt: skip

    # --8<-- [start:self_check]
    outs = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(outs, out.contiguous())
    if rank == 0:
        whole = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # one process, the whole sequence
        # The online softmax adds the exponentials in another order, in chunks: float32's last bits differ.
        torch.testing.assert_close(torch.cat(outs, dim=1), whole, rtol=1e-5, atol=1e-6)
        log("the ranks' chunks make scaled_dot_product_attention over the whole sequence (rtol 1e-5)")
        log("self-check passed")
    dist.barrier()
    # --8<-- [end:self_check]


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
