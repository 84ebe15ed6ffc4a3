"""Random augmentation in DataLoader workers: every rank seeds alike for equal initial weights, and then
draws the same augmentation on every rank, unless the loader's generator is seeded per rank.

    torchrun --standalone --nproc_per_node=2 examples/convert/step07_seeds.py

Rank 0 prints, for each way of seeding, whether the ranks drew the same augmentation for their
samples, and whether the two workers of one rank drew alike.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

SEED, SAMPLES, WORKERS = 0, 16, 2


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


class Augmented(Dataset):
    """Sample i, with a random augmentation drawn in the worker that loads it (a crop's offset, say)."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[int, float, int]:
        return i, torch.rand(()).item(), get_worker_info().id


def draws(seed_per_rank: bool) -> list[tuple[int, float, int]]:
    """This rank's samples with their augmentation draws and the worker that drew them."""
    rank = dist.get_rank()
    torch.manual_seed(SEED)  # as a script seeds for equal initial weights on every rank
    data = Augmented()
    # --8<-- [start:generator]
    generator = torch.Generator().manual_seed(SEED + rank) if seed_per_rank else None  # None: the global RNG
    loader = DataLoader(
        data,
        batch_size=2,
        sampler=DistributedSampler(data, shuffle=False),  # each rank its own samples
        num_workers=WORKERS,  # each worker seeds itself from the generator's draw + its worker id
        multiprocessing_context="forkserver",
        generator=generator,
    )
    # --8<-- [end:generator]
    return [(int(i), float(d), int(w)) for batch in loader for i, d, w in zip(*batch)]


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:
    results = {}
    for seed_per_rank in (False, True):
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, draws(seed_per_rank))  # CPU objects: gloo carries them on any backend
        samples = [[i for i, _, _ in mine] for mine in everyone]
        augmentations = [[d for _, d, _ in mine] for mine in everyone]
        by_worker = [[d for _, d, w in everyone[0] if w == worker] for worker in range(WORKERS)]
        results[seed_per_rank] = (samples, augmentations, by_worker)
        how = "the loader's generator seeded by rank" if seed_per_rank else "every rank seeded alike"
        log(
            f"{how}: ranks' samples differ: {samples[0] != samples[1]}; "
            f"the same augmentation on every rank: {augmentations[0] == augmentations[1]}; "
            f"rank 0's workers draw alike: {by_worker[0] == by_worker[1]}"
        )

    # --8<-- [start:self_check]
    alike, per_rank = results[False], results[True]
    assert all(set(a).isdisjoint(b) for a in alike[0] for b in alike[0] if a is not b), "shared samples"
    assert alike[1][0] == alike[1][1], "seeded alike, the ranks should draw the same augmentations"
    assert set(per_rank[1][0]).isdisjoint(per_rank[1][1]), "seeded by rank, every draw should differ"
    assert alike[2][0] != alike[2][1] and per_rank[2][0] != per_rank[2][1], "workers are seeded apart"
    log("self-check passed")
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
