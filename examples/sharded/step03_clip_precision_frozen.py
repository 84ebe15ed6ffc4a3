"""Three things readers ask of FSDP2, each checked against one process that trains on the whole batch:
clipping sharded gradients, bf16 mixed precision, and a frozen first layer (and what DDP syncs then).

    torchrun --standalone --nproc_per_node=2 examples/sharded/step03_clip_precision_frozen.py

Rank 0 prints what clip_grad_norm_ returns on DTensor shards, the dtypes the policy computes and steps
in, the bytes DDP all-reduces with a frozen layer, and how far each run is from one process.
"""

import argparse
import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

WIDTH = 32  # divisible by 2 and 4, so the shards are exact
GLOBAL_BATCH = 16
STEPS = 3
LR = 0.1
MAX_NORM = 0.05  # below the gradients' norm, so that clipping scales them


def make_model(frozen_first: bool = False) -> nn.Sequential:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    model = nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 4))
    model[0].requires_grad_(not frozen_first)  # fine-tuning: the first layer stays as it was
    return model


def batch(device, step: int = 0):
    x = torch.randn(GLOBAL_BATCH, 16, generator=torch.Generator().manual_seed(step))  # the same on every rank
    return x.to(device), x[:, :4].sin().to(device)


def mine(t: torch.Tensor) -> torch.Tensor:
    return t.chunk(dist.get_world_size())[dist.get_rank()]  # this rank's part of the global batch


def shard(model: nn.Sequential, mesh, **policy) -> nn.Sequential:
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, **policy)
    return fully_shard(model, mesh=mesh, **policy)


def gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    nn.functional.mse_loss(model(x).float(), y).backward()  # a bf16 output is compared in float32
    return [p.grad for p in model.parameters() if p.requires_grad]


def max_diff(sharded, whole) -> float:
    """How far FSDP's tensors, gathered whole, are from one process's, each checked against float32's
    default tolerances (rtol 1.3e-6, atol 1e-5): the ranks average half-batch gradients where one
    process averages the whole batch, the same terms added in another order."""
    pairs = [(s.full_tensor(), w) for s, w in zip(sharded, whole)]
    for s, w in pairs:
        torch.testing.assert_close(s, w)
    return max((s - w).abs().max().item() for s, w in pairs)


def count_then_allreduce(counts: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    counts["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()  # what this call syncs
    return allreduce_hook(None, bucket)  # then what DDP does by default


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


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


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def clip(mesh, device) -> None:
    (x, y), model, ref = batch(device), shard(make_model().to(device), mesh), make_model().to(device)
    gradients(model, mine(x), mine(y))
    # --8<-- [start:clip]
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)  # the one-process call, unchanged
    grad = model[0].weight.grad  # this rank's shard of the averaged gradient, clipped in place
    log(f"clip: gradients {type(grad).__name__} {grad.placements}, norm {type(norm).__name__} {norm.placements}")
    log(f"clip: total norm {norm.full_tensor():.4f} before clipping, max_norm {MAX_NORM}")
    # --8<-- [end:clip]
    ref_grads = gradients(ref, x, y)  # one process, the whole global batch
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
    assert ref_norm > MAX_NORM, "max_norm should be below the norm, so that clipping scales the gradients"
    norm_diff, grad_diff = max_diff([norm], [ref_norm]), max_diff([p.grad for p in model.parameters()], ref_grads)
    log(f"clip: max |FSDP - one process| = {norm_diff:.0e} for the norm, {grad_diff:.0e} for the gradients")


def precision(mesh, device) -> None:
    (x, y), n = batch(device), dist.get_world_size()
    # --8<-- [start:precision]
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = shard(make_model().to(device), mesh, mp_policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=LR)  # it steps the float32 shards: the master weights
    seen = []  # the weight dtype the first Linear computes with, once FSDP's pre-hook has gathered it
    model[0].register_forward_pre_hook(lambda layer, args: seen.append(layer.weight.dtype))
    grads = gradients(model, mine(x), mine(y))  # computed in bf16, cast to float32, averaged over the ranks
    opt.step()
    # --8<-- [end:precision]
    held = {f"{p.dtype} {type(p).__name__}" for p in opt.param_groups[0]["params"]}
    got = {f"{g.dtype} {type(g).__name__}" for g in grads}
    log(f"precision: layer 0 computes with {seen[0]} weights; the optimizer steps {', '.join(held)} shards")
    log(f"precision: the gradients it gets are {', '.join(got)} shards")
    # The policy, replayed in one process: each half-batch in bf16 with bf16-cast weights, the gradients
    # cast to float32 and averaged, one SGD step on the float32 weights.
    replay, low = make_model().to(device), make_model().to(device, torch.bfloat16)
    halves = [gradients(low, xs.bfloat16(), ys) for xs, ys in zip(x.chunk(n), y.chunk(n))]
    for q, *gs in zip(replay.parameters(), *halves):
        q.grad = sum(g.float() for g in gs) / n
    torch.optim.SGD(replay.parameters(), lr=LR).step()
    fp32 = make_model().to(device)  # and one process in float32 on the whole batch
    gradients(fp32, x, y)
    torch.optim.SGD(fp32.parameters(), lr=LR).step()
    exact = max_diff(model.parameters(), replay.parameters())
    plain = max((p.full_tensor() - q).abs().max().item() for p, q in zip(model.parameters(), fp32.parameters()))
    log(f"precision: max |step - one process| = {exact:.0e} replaying the policy, {plain:.0e} in float32")
    assert held == got == {"torch.float32 DTensor"} and seen[0] == torch.bfloat16
    # The same bf16 arithmetic on the same half-batches: at 2 ranks even the average adds in one order.
    assert exact == 0.0 or n != 2, "at 2 ranks the policy's step should equal its one-process replay bitwise"
    assert plain > exact, "bf16 rounding should move the step further from float32 than from its replay"


def frozen(mesh, device) -> None:
    model = shard(make_model(frozen_first=True).to(device), mesh)
    # --8<-- [start:frozen]
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=LR)  # no state and no step for the frozen layer
    # --8<-- [end:frozen]
    ddp, ref = DDP(make_model(frozen_first=True).to(device)), make_model(frozen_first=True).to(device)
    counts = {"bytes": 0}
    ddp.register_comm_hook(counts, count_then_allreduce)
    ddp_opt, ref_opt = (torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=LR) for m in (ddp, ref))
    for step in range(STEPS):
        x, y = batch(device, step)
        for m, o, xs, ys in ((model, opt, mine(x), mine(y)), (ddp, ddp_opt, mine(x), mine(y)), (ref, ref_opt, x, y)):
            gradients(m, xs, ys)
            o.step()
    w, nbytes = model[0].weight, lambda ps: sum(p.numel() * p.element_size() for p in ps)
    log(f"frozen: layer 0 weight {type(w).__name__} {w.placements}, grad {w.grad}")
    log(f"frozen: the optimizer holds {len(trainable)} of {len(list(model.parameters()))} parameters")
    log(f"frozen: max |trained - one process| = {max_diff(model.parameters(), ref.parameters()):.0e}")
    synced, trainable_bytes = counts["bytes"] // STEPS, nbytes(p for p in ref.parameters() if p.requires_grad)
    all_bytes = nbytes(ref.parameters())
    log(f"frozen: DDP all-reduced {synced} bytes a step; trainable {trainable_bytes}, whole model {all_bytes}")
    assert w.grad is None and w.placements == model[2].weight.placements, "frozen, yet sharded like the rest"
    assert len(trainable) == 4, "the optimizer should hold the two trained layers' weights and biases"
    assert counts["bytes"] == STEPS * trainable_bytes and synced < all_bytes, "DDP should sync the trainable only"


def run(args: argparse.Namespace, device: torch.device) -> None:
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    clip(mesh, device)
    precision(mesh, device)
    frozen(mesh, device)
    log("self-check passed")
    del mesh  # what the work built (models, meshes, DTensors) is gone before the caches are cleared
    release_dtensor_caches()  # so that the setup's destroy_process_group can free the group


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
