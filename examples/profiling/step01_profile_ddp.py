"""Profile before you scale: torch.profiler around a few DDP training steps on every rank.

    torchrun --standalone --nproc_per_node=2 examples/profiling/step01_profile_ddp.py

Each rank writes a trace you can open in https://ui.perfetto.dev or chrome://tracing; rank 0 also
writes the table of its busiest operators. Rank 0 prints where they are and which communication
operators the profile caught.
"""

import argparse
import datetime
import json
import os
import platform
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 1024
BATCH = 32
WAIT, WARMUP, ACTIVE = 1, 1, 3  # profiler schedule: skip one step, warm up on one, record three


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="profile", help="folder for the traces and the table (default: profile)")
    parser.add_argument("--table", help="where rank 0 writes its table of operators (default: OUT/top_ops.txt)")
    args = parser.parse_args()
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    out, rank = Path(args.out), dist.get_rank()
    table_path = Path(args.table) if args.table else out / "top_ops.txt"
    out.mkdir(parents=True, exist_ok=True)

    model = DDP(make_model().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)  # each rank its own data
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # --8<-- [start:profile]
    with profile(activities=activities, schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            x, y = (
                torch.randn(BATCH, WIDTH, generator=g).to(device),
                torch.randint(0, 10, (BATCH,), generator=g).to(device),
            )
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()  # DDP's all_reduce runs here
            opt.step()
            prof.step()  # tell the profiler a step ended
    trace = out / f"trace_rank{rank}.json"
    prof.export_chrome_trace(str(trace))
    if rank == 0:
        table_path.parent.mkdir(parents=True, exist_ok=True)
        machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, {dist.get_backend()}"
        header = f"# rank 0 of {dist.get_world_size()}, {machine}, {datetime.date.today()}\n"
        table_path.write_text(header + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12) + "\n")
    # --8<-- [end:profile]

    # --8<-- [start:self_check]
    dist.barrier()  # every rank has written its trace
    names = [e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]]
    comm = sorted({n for n in names if "allreduce" in n or "all_reduce" in n})
    calls = sum(n == "c10d::allreduce_" for n in names)
    traces = ", ".join(str(out / f"trace_rank{r}.json") for r in range(dist.get_world_size()))
    log(f"profiled {ACTIVE} training steps on {dist.get_world_size()} ranks")
    log(f"rank 0's busiest operators, by self CPU time: {table_path}")
    log(f"communication operators in rank 0's trace: {', '.join(comm)}")
    log(f"c10d::allreduce_ calls: {calls}, {calls // ACTIVE} a step")
    log(f"traces: {traces}")
    # The same buckets every step: DDP's first holds the last layers' first 1 MiB, the next the rest.
    assert calls > 0 and calls % ACTIVE == 0, calls
    assert all((out / f"trace_rank{r}.json").stat().st_size > 0 for r in range(dist.get_world_size()))
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
