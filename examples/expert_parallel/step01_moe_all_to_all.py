"""Expert parallelism: a mixture-of-experts layer whose experts live on different ranks. Each token goes
to the expert its router picks, wherever that expert is: all_to_all_single sends the tokens there
(dispatch), the owner runs them through the expert (compute), and a second all_to_all brings them home
(combine).

    torchrun --standalone --nproc_per_node=2 examples/expert_parallel/step01_moe_all_to_all.py

Rank 0 prints what each rank received and computed, and checks the output and every expert's
gradient against one process that holds all the experts. --skew sends most tokens to expert 0;
--capacity-factor caps the tokens an expert takes from each rank, and counts the ones it drops.
"""

import argparse
import os
import sys
import time
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

EXPERTS, D_MODEL, D_HIDDEN, TOKENS = 4, 64, 512, 512  # TOKENS per rank


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skew", type=float, default=0.0, help="added to expert 0's router logit (default: 0)")
    p.add_argument("--capacity-factor", type=float, help="tokens an expert takes from each rank: factor x fair share")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if EXPERTS % world:
        usage_error(f"{EXPERTS} experts cannot be shared evenly by {world} ranks")
    if args.capacity_factor is not None and args.capacity_factor <= 0:
        usage_error("--capacity-factor must be positive")
    return args


def expert(e: int, device) -> nn.Module:
    torch.manual_seed(100 + e)  # expert e's weights, the same wherever it is built
    return nn.Sequential(nn.Linear(D_MODEL, D_HIDDEN), nn.ReLU(), nn.Linear(D_HIDDEN, D_MODEL)).to(device)


def router(device, skew: float) -> nn.Linear:
    torch.manual_seed(0)  # the same router on every rank
    r = nn.Linear(D_MODEL, EXPERTS).to(device)
    with torch.no_grad():
        r.bias[0] += skew
    return r


def route(gate: nn.Linear, x: torch.Tensor, capacity: int | None):
    """Each token's expert (top-1) and gate weight; a token past its expert's capacity (counted in the
    order of this rank's tokens) is dropped: its expert is -1 and the layer outputs zero for it."""
    probs = gate(x).softmax(dim=-1)
    weight, choice = probs.max(dim=-1)
    choice = choice.clone()  # max keeps its indices for the backward: change a copy
    if capacity is not None:
        for e in range(EXPERTS):
            mine = (choice == e).nonzero().flatten()
            choice[mine[capacity:]] = -1
    return choice, weight


# --8<-- [start:all_to_all]
class AllToAll(torch.autograd.Function):
    """all_to_all_single that autograd goes through: rows[i] of x go to rank i, and in backward each
    row's gradient goes back the way the row came."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, recv: list[int], send: list[int]) -> torch.Tensor:
        ctx.recv, ctx.send = recv, send
        out = x.new_empty(sum(recv), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        back = grad.new_empty(sum(ctx.send), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.recv)
        return back, None, None


# --8<-- [end:all_to_all]


# --8<-- [start:moe]
def moe_forward(x, gate, local_experts, capacity):
    """The expert-parallel layer: route, dispatch with all_to_all, compute, combine with all_to_all."""
    world, per_rank = dist.get_world_size(), EXPERTS // dist.get_world_size()
    choice, weight = route(gate, x, capacity)
    kept = (choice >= 0).nonzero().flatten()
    order = kept[choice[kept].argsort(stable=True)]  # my kept tokens, grouped by expert: 0, 1, 2, ...
    counts = torch.bincount(choice[order], minlength=EXPERTS)  # tokens I send to each expert

    # How many tokens each rank sends to each of my experts: one all_to_all of the counts.
    theirs = torch.empty_like(counts)
    dist.all_to_all_single(theirs, counts)  # [rank 0's counts for my experts, rank 1's, ...]
    send = counts.view(world, per_rank).sum(dim=1).tolist()  # to each rank: its experts' tokens
    recv = theirs.view(world, per_rank).sum(dim=1).tolist()

    # Dispatch: the tokens travel to their experts' ranks.
    arrived = AllToAll.apply(x[order], recv, send)
    # Compute: from each rank, a block per local expert, in expert order.
    pieces = arrived.split(theirs.tolist())  # (rank 0, my expert 0), (rank 0, my expert 1), (rank 1, ...
    start = time.perf_counter()
    done = torch.cat([local_experts[i % per_rank](p) for i, p in enumerate(pieces)])
    if done.is_cuda:
        torch.cuda.synchronize(done.device)
    compute_s = time.perf_counter() - start
    # Combine: the results travel back, in the order they came.
    back = AllToAll.apply(done, send, recv)

    out = torch.zeros_like(x)  # dropped tokens stay zero (a residual connection would carry them)
    out = out.index_add(0, order, back * weight[order, None])
    return out, sum(recv), compute_s


# --8<-- [end:moe]


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = EXPERTS // world
    gate = router(device, args.skew)
    local = [expert(e, device) for e in range(rank * per_rank, (rank + 1) * per_rank)]  # my experts
    torch.manual_seed(1 + rank)  # my tokens
    x = torch.randn(TOKENS, D_MODEL, device=device)
    capacity = None if args.capacity_factor is None else int(args.capacity_factor * TOKENS / EXPERTS)

    moe_forward(x, gate, local, capacity)  # a first pass, so that one-time costs stay out of the timing
    out, received, seconds = moe_forward(x, gate, local, capacity)
    out.square().mean().backward()

    # What each rank received and computed: the load of its experts.
    dropped = torch.tensor([int((route(gate, x, capacity)[0] < 0).sum())], device=device)
    stats = torch.tensor([received, received * D_HIDDEN * 4, seconds * 1e3], device=device, dtype=torch.float64)
    table = [torch.zeros_like(stats) for _ in range(world)]
    dist.all_gather(table, stats)
    dist.all_reduce(dropped)
    log("rank  experts  tokens in  hidden activations (KiB)  experts' forward (ms)")
    for r, row in enumerate(table):
        tokens, hidden_bytes, ms = row.tolist()
        experts = f"{r * per_rank}-{(r + 1) * per_rank - 1}"
        log(f"{r:>4}  {experts:<7}  {tokens:>9.0f}  {hidden_bytes / 1024:>24.0f}  {ms:>21.1f}")
    log(f"tokens dropped past capacity: {int(dropped.item())} of {TOKENS * world}")

    # --8<-- [start:self_check]
    # One process: every rank's tokens, every expert, the same router and the same drops.
    xs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(xs, x)
    outs = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(outs, out.detach())
    experts = [expert(e, device) for e in range(EXPERTS)]
    ref_loss = 0
    for r in range(world):
        choice, weight = route(gate, xs[r], capacity)
        ref = torch.zeros_like(xs[r])
        for e in range(EXPERTS):
            mine = (choice == e).nonzero().flatten()
            ref = ref.index_add(0, mine, experts[e](xs[r][mine]) * weight[mine, None])
        # Float32 sums of other lengths (each expert sees the tokens in another order and batch) differ
        # in the last bits; a token sent to the wrong expert, or combined out of order, is far off.
        torch.testing.assert_close(outs[r], ref, rtol=1e-5, atol=1e-6)
        ref_loss = ref_loss + ref.square().mean()
    (ref_loss / world).backward()  # the mean of the ranks' losses, as the sum of their gradients / world
    for i, mine in enumerate(local):  # my experts' gradients came back from every rank's tokens
        for p, q in zip(mine.parameters(), experts[rank * per_rank + i].parameters()):
            torch.testing.assert_close(p.grad / world, q.grad, rtol=1e-5, atol=1e-6)
    log("the outputs and every expert's gradient match one process with all the experts (rtol 1e-5)")
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
