"""Replica-level recovery with torchft: data parallelism across replica groups that a torchft Manager
joins step by step. When a group dies, the others train on without it; when it comes back, it copies
the weights from a live group ("heals") and joins again. Nothing restarts but the group that died.

    TORCHFT_LIGHTHOUSE=http://127.0.0.1:29511 REPLICA_GROUP_ID=0 torchrun --standalone --nproc_per_node=1 examples/fault_tolerance/step04_torchft.py --host-lighthouse

Each replica group here is one process started by its own torchrun; a group can host the lighthouse,
the server that forms each step's quorum. Every group checks its weights against one process that
averages, step by step, the batches that counted, and prints a hash of its final weights.
Needs torchft (`pip install torchft==0.2.0`).
"""

import argparse
import gc
import hashlib
import os
import sys
import time
from datetime import timedelta
from urllib.parse import urlparse

import torch
import torch.distributed.nn  # noqa: F401  before any process group: imported later, its defaults pin the group
from torch import nn
from torch.distributed import ReduceOp
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo, ProcessGroupNCCL

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 1
TIMEOUT_S = 60

STEPS, BATCH, LR = 40, 16, 0.05  # the model, data and optimizer of the checkpoint-and-resume example


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host-lighthouse", action="store_true", help="run the lighthouse in this process")
    p.add_argument("--step-seconds", type=float, default=0.1, help="sleep after each step (default: 0.1)")
    args = p.parse_args()
    problems = []
    if "TORCHFT_LIGHTHOUSE" not in os.environ or "REPLICA_GROUP_ID" not in os.environ:
        problems.append("set TORCHFT_LIGHTHOUSE (the lighthouse's URL) and REPLICA_GROUP_ID (this group's number)")
    if not 0 <= args.step_seconds <= 10:
        problems.append("--step-seconds must be in 0..10")
    if problems:
        sys.exit("error: " + "; ".join(problems))
    return args


def batch(group: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Group `group`'s samples at step `step`: the same on a retried step and in the reference."""
    g = torch.Generator().manual_seed(1000 * step + group)
    x = torch.randn(BATCH, 32, generator=g)
    return x, x[:, :1] * x[:, 1:2] + 0.1 * torch.randn(BATCH, 1, generator=g)


def build(device: torch.device):
    torch.manual_seed(0)  # the same initial weights in every group
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def reference(counted: list[tuple[list[int], int]], device: torch.device):
    """One process: at each step, the gradients of the groups whose batches counted, summed and
    divided by the number of groups in the quorum, as torchft's allreduce does."""
    model, opt = build(device)
    for step, (groups, n) in enumerate(counted):
        grads = []
        for group in groups:
            x, y = batch(group, step)
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            opt.zero_grad()
        for p, *g in zip(model.parameters(), *grads):
            p.grad = sum(g[1:], g[0]) / n
        opt.step()
        opt.zero_grad()
    return model


def run(args: argparse.Namespace, group: int, device: torch.device) -> None:
    model, inner = build(device)
    counted: list[list[int]] = []  # per step: the groups whose batches counted (bit g for group g), the quorum's size

    # --8<-- [start:manager]
    def state_dict():  # what a healing group copies from a live one
        return {"model": model.state_dict(), "optim": inner.state_dict(), "counted": list(counted)}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])
        counted[:] = state["counted"]

    pg = ProcessGroupNCCL() if device.type == "cuda" else ProcessGroupGloo()  # across groups, rebuilt every quorum
    manager = Manager(
        pg=pg,
        min_replica_size=1,  # train on while at least one group is alive
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"group_{group}",
        timeout=timedelta(seconds=TIMEOUT_S),
    )
    ddp = DistributedDataParallel(manager, model.to(device))  # averages gradients over the groups in the quorum
    opt = Optimizer(manager, inner)  # steps only if every group of the quorum succeeded
    # --8<-- [end:manager]

    last, first = time.monotonic(), True
    # --8<-- [start:train]
    while manager.current_step() < STEPS:
        step = manager.current_step()  # a step that failed is tried again, with the same data
        opt.zero_grad()  # also starts this step's quorum: who is alive, and who must heal first
        manager.wait_quorum()  # a group that must heal copies a live group's state here
        step = manager.current_step()  # after healing, the live groups' step
        x, y = batch(group, step)
        nn.functional.mse_loss(ddp(x.to(device)), y.to(device)).backward()  # gradients averaged over the quorum
        mine = torch.tensor([2.0**group], dtype=torch.float64, device=device)
        manager.allreduce(mine, reduce_op=ReduceOp.SUM).wait()  # a healing group's bit is zeroed, like its gradients
        opt.step()  # applied only if every group of the quorum succeeded
        if manager.current_step() == step + 1:  # committed
            counted.append([int(mine.item()), manager.num_participants()])
            if first:  # this process's first step: a group that healed starts where the live ones are
                how = "from the start" if step == 0 else "with the weights it copied from a live group"
                print(f"[group {group}] first step: {step}, {how}", flush=True)
            first = False
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the step's kernels done, before the clock
            now = time.monotonic()
            if now - last > 1:
                print(f"[group {group}] step {step}: {now - last:.1f} s after the one before, "
                      f"{manager.num_participants()} group(s) taking part", flush=True)  # fmt: skip
            last = now
        time.sleep(args.step_seconds)
    # --8<-- [end:train]

    # --8<-- [start:self_check]
    steps = [([g for g in range(8) if bits >> g & 1], n) for bits, n in counted]
    assert len(steps) == STEPS and all(groups for groups, _ in steps), steps
    for p, q in zip(model.parameters(), reference(steps, device).parameters()):
        assert torch.equal(p, q), "the weights differ from one process averaging the same batches"
    if group == 0:  # "0+1": both groups' batches; "0/2": group 0's batch, over a quorum of 2 (one healing at step 0)
        shown = ["+".join(map(str, g)) + (f"/{n}" if n != len(g) else "") for g, n in steps]
        print("groups whose batches counted, step by step:", " ".join(shown))
        print("the weights equal one process averaging the same batches, bit for bit")
        print("self-check passed", flush=True)
    # --8<-- [end:self_check]
    params = b"".join(p.detach().cpu().contiguous().numpy().tobytes() for p in model.parameters())
    print(f"[group {group}] weights_sha256={hashlib.sha256(params).hexdigest()}", flush=True)
    manager.shutdown()
    pg.shutdown()  # drops the group: gloo stops its threads once nothing holds it (see main)


def main() -> None:
    args = parse_args()  # before anything starts: a bad flag exits 2 (argparse) or 1 with one line
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}")
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        if device.index >= torch.cuda.device_count():  # more processes than GPUs: nccl cannot share one
            sys.exit(
                f"error: local rank {device.index} has no GPU (this node has {torch.cuda.device_count()}); launch one "
                f"process per GPU, or run on the CPU: CUDA_VISIBLE_DEVICES= torchrun --standalone "
                f"--nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
            )
        torch.cuda.set_device(device)
    # No init_process_group: the Manager builds the group across replica groups for each quorum, and
    # finds the others through the lighthouse and this group's torchrun store (MASTER_ADDR/PORT).
    lighthouse = None
    if args.host_lighthouse:
        from torchft.coordination import LighthouseServer

        port = urlparse(os.environ["TORCHFT_LIGHTHOUSE"]).port
        lighthouse = LighthouseServer(bind=f"[::]:{port}", min_replicas=1)  # a quorum of one may train
    try:
        run(args, int(os.environ["REPLICA_GROUP_ID"]), device)  # what it built is freed when it returns
        gc.collect()  # torch's DDP and torchft's manager sit in reference cycles that hold the group
    finally:
        if lighthouse is not None:
            lighthouse.shutdown()


if __name__ == "__main__":
    main()
