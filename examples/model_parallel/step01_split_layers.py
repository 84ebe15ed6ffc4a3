"""Model parallelism by hand: the first half of the layers on rank 0, the second half on rank 1.

    torchrun --standalone --nproc_per_node=2 examples/model_parallel/step01_split_layers.py

Exactly 2 processes. Rank 0 prints the bytes of parameters, gradients and momentum each rank holds,
next to one process holding the whole model, and whether both halves are bitwise equal to it.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 256
STEPS = 30
BATCH = 32
LR = 0.05
MOMENTUM = 0.9


def make_full_model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)  # the same weights on both ranks, and in the reference
    return nn.Sequential(
        nn.Linear(16, WIDTH),
        nn.Tanh(),
        nn.Linear(WIDTH, WIDTH),
        nn.Tanh(),  # stage 0: rank 0
        nn.Linear(WIDTH, WIDTH),
        nn.Tanh(),
        nn.Linear(WIDTH, 1),  # stage 1: rank 1
    )


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


def state_bytes(module: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, int, int]:
    """Bytes of parameters, gradients and optimizer state, counted from the tensors themselves."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in module.parameters() if p.grad is not None)
    states = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    return params, grads, states


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
    world_size = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if world_size != NPROC_PER_NODE:
        usage_error(
            f"this example needs exactly {NPROC_PER_NODE} processes, got {world_size}; launch it with: "
            f"torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
        )
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    full = make_full_model()
    stage = (full[:4] if rank == 0 else full[4:]).to(device)  # keep only my half
    opt = torch.optim.SGD(stage.parameters(), lr=LR, momentum=MOMENTUM)
    activation_shape = (BATCH, WIDTH)

    for x, y in batches(device):
        opt.zero_grad()
        # --8<-- [start:step]
        if rank == 0:
            h = stage(x)
            dist.send(h.detach(), dst=1)  # activations forward
            grad_h = torch.empty(activation_shape, device=device)
            dist.recv(grad_h, src=1)  # ... idle while rank 1 works ...
            h.backward(grad_h)  # finish backprop through my layers
        else:
            h = torch.empty(activation_shape, device=device)
            dist.recv(h, src=0)  # idle until rank 0's forward is done
            h.requires_grad_()  # so that backward gives us dloss/dh to send back
            loss = nn.functional.mse_loss(stage(h), y)
            loss.backward()
            dist.send(h.grad, dst=0)  # gradients backward
        opt.step()
        # --8<-- [end:step]

    # --8<-- [start:self_check]
    # One process, the whole model, the same batches.
    reference = make_full_model().to(device)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)
    for x, y in batches(device):
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    my_half = reference[:4] if rank == 0 else reference[4:]
    same = all(torch.equal(p, q) for p, q in zip(stage.parameters(), my_half.parameters()))

    mine = state_bytes(stage, opt)
    every = [None, None]
    dist.all_gather_object(every, (mine, same))
    whole = state_bytes(reference, ref_opt)
    log(f"{'':>12} {'parameters':>11} {'gradients':>10} {'momentum':>9} {'share':>6}")
    log(f"{'one process':>12} {whole[0]:>11} {whole[1]:>10} {whole[2]:>9} {'100%':>6}")
    for r, (b, _) in enumerate(every):
        log(f"{f'rank {r}':>12} {b[0]:>11} {b[1]:>10} {b[2]:>9} {sum(b) / sum(whole):>6.1%}")
    log(f"both halves bitwise equal to the one-process model after {STEPS} steps: {all(s for _, s in every)}")
    assert all(s for _, s in every), "a stage drifted from the one-process model"
    assert sum(b[0] for b, _ in every) == whole[0]  # the split lost or duplicated nothing
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
