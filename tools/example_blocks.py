"""The blocks that the examples repeat by design, each written once: here. `make sync-examples`
(tools/sync_examples.py) stamps them into every example that has one, and tests/test_examples.py fails,
naming the file and the block, on a copy that differs.

Why copies: a reader copies one example file and runs it with torch alone, so the setup the first lesson
explains, and the few helpers around it, stand in plain sight in every file. Why this file: examples/ is
no place for it, since docexec.fences.all_examples() takes every .py file there for a runnable example
(launched by the tests, required on a page); nor src/distdocs, which these blocks must not be imported
from; nor includes/, which holds the Markdown the pages include. tools/ holds what make targets run, and
this is what `make sync-examples` reads. Nothing imports or runs this file.

A copy is found the same way here as in an example:
- `setup`: the lines between `# --8<-- [start:setup]` and `# --8<-- [end:setup]`;
- `timeout_comment`: the comment lines right above `NPROC_PER_NODE = `;
- `log`, `now`, `usage_error`, `release_dtensor_caches`, `save_atomically`: the top-level function of
  that name, whole.
What differs between examples stays out of the blocks: NPROC_PER_NODE and TIMEOUT_S are named
constants, and parse_args and run are each example's own (the stand-ins below only let ruff check this
file as Python).
"""

import argparse
import gc
import os
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60


def parse_args() -> argparse.Namespace:  # a stand-in: each example parses its own flags
    return argparse.ArgumentParser().parse_args()


def run(args: argparse.Namespace, device: torch.device) -> None:  # a stand-in: each example's work
    pass


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def now(device: torch.device) -> float:
    """The clock, once `device` has done the work queued on it: CUDA runs asynchronously, and a clock read
    right after a GPU step would time the queueing, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def save_atomically(state: dict, path: str, group: dist.ProcessGroup | None = None) -> None:
    """Rank 0 of `group` writes a temporary file beside `path`, flushes it to disk, then renames it over
    `path`: a crash leaves the old checkpoint or the new one, never half of one. Every rank waits for it."""
    if dist.get_rank(group) == 0:
        folder = os.path.dirname(os.path.abspath(path))
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".checkpoint-", delete=False) as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the new name does
        os.replace(f.name, path)  # atomic on POSIX: readers see the old file or the new one
        fd = os.open(folder, os.O_RDONLY)  # and make the rename itself durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    dist.barrier(group)  # nobody reads or trains past a checkpoint that is not on disk yet


def release_dtensor_caches() -> None:
    """Let destroy_process_group free the process group on gloo. torch 2.13's DTensor keeps every
    DeviceMesh it has used in caches, and a mesh holds its groups; gloo cannot stop the threads of a
    group that is still held, and they race the interpreter's exit, which can abort it (the known torch
    issue on the data-parallelism page). On torch 2.13, without this, gloo threads outlived the group in
    every example that calls it, and with any one of the four caches left alone, in most of them; torch
    clears the first in its own tests for the same reason (https://github.com/pytorch/pytorch/pull/172504).
    torch 2.14.1 keeps all four, each still holding meshes. nccl stops its threads at destroy and needs
    none of this. These caches are torch internals: each is
    cleared only where this torch has it."""
    if dist.get_backend() != "gloo":
        return
    from torch.distributed.tensor import _collective_utils, _redistribute, debug

    for clear in (
        getattr(debug, "_clear_sharding_prop_cache", None),
        getattr(_collective_utils.MeshTopoInfo.build_from_mesh, "cache_clear", None),
        getattr(_redistribute, "clear_redistribute_planner_cache", None),
        getattr(getattr(_redistribute, "_gen_transform_infos", None), "cache_clear", None),
    ):
        if clear is not None:
            clear()
    gc.collect()  # what the work built can sit in reference cycles that hold the group (FSDP's modules do)


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
