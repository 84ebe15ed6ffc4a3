"""DataLoader workers hand each batch to the training process through shared memory (/dev/shm): a
worker writes the batch there, and the main process maps the same pages. Large batches from several
workers need more of it at once than a container's default 64 MB.

    python examples/debugging/step11_shared_memory.py

It prints how much shared memory its batches can hold at once, moves 256 images through it, and checks
that each arrived once, intact. Where /dev/shm is 64 MB (a container started without --shm-size), a
worker fails with "unable to allocate shared memory(shm)"; `--batch-size 8` fits there. It has no
init_process_group: the workers are one process's helpers, and under torchrun each rank's DataLoader
does the same, so n ranks on a node need n times the shared memory shown here.
"""

import argparse

import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

IMAGE = (3, 256, 256)  # float32: 768 KiB an image
SAMPLES = 256
PREFETCH = 2  # DataLoader's default prefetch_factor: the batches each worker keeps ready ahead of the loop


class Images(Dataset):
    """Image i holds the value i in every pixel, so that the training process can tell which arrived."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full(IMAGE, float(i)), i


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64, help="images a batch (default: 64, 48 MiB)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (0: load here, without shared memory)")
    p.add_argument(
        "--sharing-strategy",
        choices=sorted(torch.multiprocessing.get_all_sharing_strategies()),
        default=torch.multiprocessing.get_sharing_strategy(),
        help="how workers hand tensors over (default: %(default)s); both strategies use /dev/shm on Linux",
    )
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.multiprocessing.set_sharing_strategy(args.sharing_strategy)
    batch_mib = args.batch_size * torch.Size(IMAGE).numel() * 4 / 2**20
    # --8<-- [start:loader]
    loader = DataLoader(
        Images(), batch_size=args.batch_size, num_workers=args.workers,
        prefetch_factor=PREFETCH if args.workers else None,  # batches a worker builds ahead, each in /dev/shm
    )  # fmt: skip
    # --8<-- [end:loader]
    if args.workers:
        ahead = args.workers * PREFETCH
        print(
            f"{args.workers} workers x {PREFETCH} batches ahead x {batch_mib:.0f} MiB: "
            f"{ahead * batch_mib:.0f} MiB of /dev/shm ready ahead of the loop, and the batches it holds"
        )
    else:
        print("no workers: this process builds every batch, in its own memory")

    seen, shared_mib = [], 0.0
    for images, labels in loader:
        assert images.is_shared() == (args.workers > 0), "a worker's batch arrives in shared memory"
        every_pixel = images.flatten(1)
        assert torch.equal(every_pixel.amin(1), labels.float()) and torch.equal(every_pixel.amax(1), labels.float())
        shared_mib += images.numel() * 4 / 2**20 if images.is_shared() else 0
        seen += labels.tolist()
    print(f"moved {len(seen)} images in batches of {args.batch_size}, {shared_mib:.0f} MiB through shared memory")

    # --8<-- [start:self_check]
    assert sorted(seen) == list(range(SAMPLES)), "an image was lost or came twice"
    print("every image arrived once, intact")
    print("self-check passed")
    # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
