"""A hang, found with the flight recorder: every rank records its collectives, and torch's analyser
names the rank and the call that diverged. The bug: rank 0 broadcasts its early-stopping decision
inside `if rank == 0`, so the others never join that broadcast, and their next all_reduce waits for
rank 0 instead. `--fixed` has every rank call the broadcast.

    torchrun --standalone --nproc_per_node=2 examples/debugging/step07_flight_recorder.py --fixed

With --fixed, the ranks' records agree and the self-check passes. Without it, the ranks hang: after
DUMP_AFTER_S a watchdog thread writes each rank's record to --dump-dir, and the collective then
fails at TIMEOUT_S. `python -m torch.distributed.flight_recorder.fr_trace DIR --prefix rank_` reads them.
"""

import argparse
import os
import pickle
import sys
import threading
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 20
# (20 s here, not 60: the hang should end soon after the record is written.)
DUMP_AFTER_S = 5  # no result by then: write the flight record (nccl's watchdog does it at the timeout)
# The flight recorder keeps the last this-many collectives of each rank; 0, torch's default, turns it off.
# It is read when the process group is created, so set it before init_process_group (or in the shell).
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

STEPS, CHECK_EVERY = 12, 4


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fixed", action="store_true", help="every rank joins the broadcast")
    p.add_argument("--dump-dir", default="flight-records", help="where the records go (default: flight-records)")
    return p.parse_args()


# --8<-- [start:record]
def flight_record() -> dict:
    """This rank's flight record: its last collectives, oldest first, each with its sequence number,
    name, sizes, state and the Python stack that called it (a private torch API, as of 2.13)."""
    record = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    # torch 2.13 with gloo names the default group "" in the record's group table but "0" in its
    # entries, and the analyser looks each entry's group up in that table (KeyError: ('0', 0)):
    # key the table by the entries' names.
    groups = {tuple(e["process_group"]) for e in record["entries"]}
    ranks = str(list(range(dist.get_world_size())))
    record["pg_config"] = {name: {"name": name, "desc": desc, "ranks": ranks} for name, desc in groups}
    return record


def dump_if_stuck(folder: Path, done: threading.Event) -> threading.Thread:
    """A watchdog: unless `done` is set within DUMP_AFTER_S, write this rank's record to folder/rank_N."""

    def watch() -> None:
        if not done.wait(DUMP_AFTER_S):
            path = folder / f"rank_{dist.get_rank()}"  # the analyser's --prefix rank_
            path.write_bytes(pickle.dumps(flight_record()))
            rank = dist.get_rank()
            print(f"[rank {rank}] no progress for {DUMP_AFTER_S} s: flight record written to {path}", flush=True)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


# --8<-- [end:record]


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    folder = Path(args.dump_dir)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)  # each rank's own data
    done = threading.Event()
    watchdog = dump_if_stuck(folder, done)

    # --8<-- [start:train]
    stop = torch.zeros(1, device=device)
    for step in range(1, STEPS + 1):
        x, y = torch.randn(8, 16, device=device), torch.randn(8, 1, device=device)
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():  # average the gradients: one all_reduce each
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        opt.zero_grad()
        if step % CHECK_EVERY == 0:
            if args.fixed or rank == 0:  # the bug: without --fixed, only rank 0 reaches the broadcast
                stop.fill_(float(rank == 0 and step >= STEPS))  # rank 0 decides whether to stop
                dist.broadcast(stop, src=0)
            if stop.item():
                break
    # --8<-- [end:train]
    done.set()
    watchdog.join()

    # --8<-- [start:self_check]
    mine = [(e["collective_seq_id"], e["profiling_name"]) for e in flight_record()["entries"]]
    records = [None] * dist.get_world_size()
    dist.all_gather_object(records, mine)
    assert all(r == records[0] for r in records), "the ranks' flight records differ"
    log(f"every rank recorded the same {len(mine)} collectives, the last {mine[-1][1]}")
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
