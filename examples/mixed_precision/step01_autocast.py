"""Mixed precision in DDP: bfloat16 autocast on the CPU, float16 with a GradScaler on a GPU.

    torchrun --standalone --nproc_per_node=2 examples/mixed_precision/step01_autocast.py

Rank 0 prints the dtypes autocast leaves on activations, weights and gradients, the bytes one
forward keeps for backward in float32 and in mixed precision, and the training loss of both runs.
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

STEPS = 300
BATCH_PER_RANK = 32
LR = 0.05
LOSS_TOLERANCE = 0.05  # relative; see the self-check


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank, and for both runs
    return nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 1))


def batches(device):
    """Each rank its own shard of a regression task that the model can learn."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(64, 1, generator=g) / 8
    g.manual_seed(2 + dist.get_rank())
    for _ in range(STEPS):
        x = torch.randn(BATCH_PER_RANK, 64, generator=g)
        yield x.to(device), torch.sin(x @ w).to(device)


def train(device, amp_dtype: torch.dtype | None) -> list[float]:
    """STEPS steps of DDP training, in float32 (amp_dtype None) or under autocast; the losses."""
    model = DDP(make_model().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    # --8<-- [start:autocast]
    # float16's range is narrow: small gradients underflow to 0 unless the loss is scaled up first.
    # bfloat16 has float32's range and needs no scaler; with enabled=False the scaler does nothing.
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    for x, y in batches(device):
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            out = model(x)  # matmuls run in amp_dtype; the weights stay float32
        loss = nn.functional.mse_loss(out.float(), y)  # the loss in float32
        opt.zero_grad()
        scaler.scale(loss).backward()  # gradients arrive in float32, like the weights
        scaler.step(opt)  # unscales, skips the step if a gradient overflowed
        scaler.update()
        losses.append(loss.item())
    # --8<-- [end:autocast]
    return losses


def saved_for_backward(device, amp_dtype: torch.dtype | None) -> tuple[dict, dict]:
    """The bytes one forward keeps for backward, as activations and as copies of the weights (the
    parameters themselves not counted), and the dtypes of the output, the weights and the gradients."""
    model = make_model().to(device)
    params = {p.data_ptr() for p in model.parameters()}
    held = {"activations": 0, "weight copies": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in params:  # an activation has a row per sample; no weight has 32 rows
            is_activation = t.dim() > 0 and t.shape[0] == BATCH_PER_RANK
            held["activations" if is_activation else "weight copies"] += t.numel() * t.element_size()
        return t

    x, y = next(batches(device))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            out = model(x)
    nn.functional.mse_loss(out.float(), y).backward()
    weight = model[0].weight
    return held, {"activations": out.dtype, "weights": weight.dtype, "gradients": weight.grad.dtype}


def parse_args() -> argparse.Namespace:
    return argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help, and no flags


def run(args: argparse.Namespace, device: torch.device) -> None:
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    full_bytes, _ = saved_for_backward(device, None)
    mixed_bytes, dtypes = saved_for_backward(device, amp_dtype)
    full, mixed = train(device, None), train(device, amp_dtype)
    end_full, end_mixed = sum(full[-10:]) / 10, sum(mixed[-10:]) / 10

    log(f"mixed precision: {amp_dtype} autocast on {device.type}")
    log("dtypes under autocast: " + ", ".join(f"{k} {v}" for k, v in dtypes.items()))
    for name, held in (("float32", full_bytes), ("mixed", mixed_bytes)):
        log(
            f"saved for backward by one forward of {BATCH_PER_RANK} samples, {name}: "
            f"activations {held['activations']} bytes, weight copies {held['weight copies']} bytes"
        )
    log(f"loss, first step: float32 {full[0]:.4f}, mixed {mixed[0]:.4f}")
    log(f"loss, mean of the last 10 of {STEPS} steps: float32 {end_full:.4f}, mixed {end_mixed:.4f}")
    assert dtypes == {"activations": amp_dtype, "weights": torch.float32, "gradients": torch.float32}
    # Every activation is kept in 2 bytes instead of 4; autocast also keeps a 16-bit copy of each weight.
    assert 2 * mixed_bytes["activations"] == full_bytes["activations"]
    assert full_bytes["weight copies"] == 0 < mixed_bytes["weight copies"]
    # Both runs learn (the loss falls more than 5-fold), and the mixed run ends within 5% of float32:
    # autocast rounds each matmul's inputs to 8 significant bits (relative error 2^-8, 0.4%), but the
    # loss averages over the batch and the updates land on float32 weights, so the errors do not pile up.
    assert end_full < full[0] / 5 and end_mixed < mixed[0] / 5
    assert abs(end_mixed - end_full) <= LOSS_TOLERANCE * end_full
    log("self-check passed")


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
