"""Activation recomputation in three settings: none, selective (the core attention recomputed) and full
(every layer wrapped in checkpoint_wrapper, as FSDP users do), on a stack of GPT layers.

    torchrun --standalone --nproc_per_node=2 examples/recomputation/step01_three_settings.py

Rank 0 prints what one forward keeps for backward in each setting, counted tensor by tensor, beside
Korthikanti et al.'s formula, and a forward and backward's time; then each setting trains under FSDP2.
"""

import argparse
import gc
import math
import os
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

SEQ, BATCH, HIDDEN, HEADS, LAYERS = 128, 2, 256, 8, 4  # s, b (per rank), h, a, L
DROPOUT = 0.1
SETTINGS = ("none", "selective", "full")
STEPS = 3  # FSDP2 training steps in each setting
TIMED = 5  # timed forward-backward passes of each setting, after one untimed


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


# --8<-- [start:layer]
class Layer(nn.Module):
    """A GPT layer as Korthikanti et al. 2022 count its activations: layer norm, attention that keeps
    its scores, dropout, a 4h MLP."""

    def __init__(self, selective: bool = False) -> None:
        super().__init__()
        self.selective = selective
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.qkv, self.proj = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Linear(HIDDEN, HIDDEN)
        self.fc1, self.fc2 = nn.Linear(HIDDEN, 4 * HIDDEN), nn.Linear(4 * HIDDEN, HIDDEN)

    def core_attention(self, q, k, v):
        # Three tensors of a·s²·b values (scores softmaxed, the dropout's mask and output) but few FLOPs:
        # the part that selective recomputation recomputes.
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return F.dropout(torch.softmax(scores, dim=-1), DROPOUT, self.training) @ v

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, h // HEADS).permute(2, 0, 3, 1, 4)
        if self.selective:  # keep q, k and v; redo the rest in backward, with the same dropout mask
            o = checkpoint(self.core_attention, q, k, v, use_reentrant=False)
        else:
            o = self.core_attention(q, k, v)
        x = x + F.dropout(self.proj(o.transpose(1, 2).reshape(b, s, h)), DROPOUT, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.norm2(x)))), DROPOUT, self.training)


def make_model(setting: str, device, dtype=torch.float32) -> nn.Sequential:
    torch.manual_seed(0)  # the same weights on every rank and in every setting
    layers = [Layer(selective=setting == "selective") for _ in range(LAYERS)]
    if setting == "full":  # each layer keeps its input only, and runs its forward again in backward
        layers = [checkpoint_wrapper(layer) for layer in layers]
    return nn.Sequential(*layers).to(device, dtype)


# --8<-- [end:layer]


# --8<-- [start:count]
def saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes that one forward keeps for backward: the storage of every tensor autograd saves, once
    (q, k and v are views of one), the parameters not counted."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)  # alive until the count is taken, so no saved storage is freed and reused
    total = sum(kept.values())
    del out
    return total


def korthikanti_bytes(setting: str, value: int, mask: int, stats: int) -> int:
    """Korthikanti et al. 2022, Table 2, for L layers: s·b·h·(34 + 5·a·s/h) bytes a layer with 2-byte
    values and 1-byte dropout masks; 34·s·b·h when the core attention is recomputed; 2·s·b·h, the
    input, when the whole layer is. Here with this device's sizes, and the layer norms' statistics
    (a mean and a 1/std per token, twice), which the paper leaves out."""
    sbh, as2b, sb = SEQ * BATCH * HIDDEN, HEADS * SEQ * SEQ * BATCH, SEQ * BATCH
    if setting == "full":
        return value * sbh * LAYERS
    layer = (16 * value + 2 * mask) * sbh + 4 * stats * sb
    if setting == "none":
        layer += (2 * value + mask) * as2b
    return layer * LAYERS


# --8<-- [end:count]


def grads_of_one_step(setting: str, device, x: torch.Tensor) -> list[torch.Tensor]:
    model = make_model(setting, device)
    torch.manual_seed(1)  # the same dropout masks in every setting
    model(x).square().mean().backward()
    return [p.grad for p in model.parameters()]


def seconds_per_pass(models: dict, x: torch.Tensor, device) -> dict[str, float]:
    """Median time of a forward and backward in each setting, taking turns so all see the same machine."""
    times = {name: [] for name in models}
    for i in range(1 + TIMED):
        for name, model in models.items():
            start = time.perf_counter()
            model(x).square().mean().backward()
            if device.type == "cuda":
                torch.cuda.synchronize()  # the GPU runs behind the host; wait for it before reading the clock
            if i:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def batch(step: int, rank: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=g)
    return x.to(device), torch.roll(x, 1, dims=1).to(device)  # learn to predict the previous token's vector


def train_fsdp(setting: str, device, mesh) -> list[torch.Tensor]:
    """STEPS steps of FSDP2 over every rank, each with its own batch and dropout masks; the weights."""
    model = make_model(setting, device)
    for layer in model:
        fully_shard(layer, mesh=mesh)  # after checkpoint_wrapper, as torchtitan does
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = batch(step, dist.get_rank(), device)
        torch.manual_seed(1000 * step + dist.get_rank())  # each rank its own dropout masks
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # reduce-scatters the gradients, averaged over the ranks
        opt.step()
    return [p.full_tensor() for p in model.parameters()]


def train_one_process(device, world_size: int) -> list[torch.Tensor]:
    """The same steps in one process without recomputation: every rank's batch, with its masks."""
    model = make_model("none", device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        for rank in range(world_size):
            x, y = batch(step, rank, device)
            torch.manual_seed(1000 * step + rank)
            (F.mse_loss(model(x), y) / world_size).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


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


def run(args: argparse.Namespace, device: torch.device) -> None:
    # Counted in bfloat16, as real jobs keep activations and as the paper counts them. A CPU's dropout
    # multiplies by a mask of the activations' dtype and its layer norm keeps bf16 statistics; CUDA's
    # fused dropout keeps a 1-byte bool mask, and its layer norm float32 statistics.
    value, mask, stats = (2, 1, 4) if device.type == "cuda" else (2, 2, 2)
    x16 = torch.randn(BATCH, SEQ, HIDDEN, device=device, dtype=torch.bfloat16, requires_grad=True)
    kept = {s: saved_bytes(make_model(s, device, torch.bfloat16), x16) for s in SETTINGS}
    x = torch.randn(BATCH, SEQ, HIDDEN, device=device)
    seconds = seconds_per_pass({s: make_model(s, device) for s in SETTINGS}, x, device)

    log(f"{LAYERS} GPT layers, s={SEQ} tokens, b={BATCH}, h={HIDDEN}, a={HEADS} heads, on {device.type}")
    log("recompute  kept for backward (bf16)  Korthikanti et al.  fwd+bwd (float32)")
    for s in SETTINGS:
        formula, ratio = korthikanti_bytes(s, value, mask, stats), seconds[s] / seconds["none"]
        log(f"{s:<9} {kept[s]:>16,} B {formula:>18,} B {ratio:>13.2f}x")

    # Recomputing runs the same operations on the same inputs, with the same dropout masks: the
    # gradients are bit for bit those of keeping everything.
    grads = {s: grads_of_one_step(s, device, x) for s in SETTINGS}
    for s in SETTINGS:
        assert kept[s] == korthikanti_bytes(s, value, mask, stats), (s, kept[s])
        assert all(torch.equal(a, b) for a, b in zip(grads[s], grads["none"])), s
    log("one process: the three settings' gradients are bit for bit equal")

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    reference = train_one_process(device, dist.get_world_size())
    for s in SETTINGS:
        trained = train_fsdp(s, device, mesh)
        # The reduce-scatter may add the ranks' gradients in another order than one process does:
        # float32 rounding, at most a few units in the last place (~1e-7) a step, and none where the
        # sums happen to round alike. A lost or doubled gradient moves the weights by about
        # lr x gradient, far above the tolerance.
        for a, b in zip(trained, reference):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        worst = max((a - b).abs().max().item() for a, b in zip(trained, reference))
        log(f"FSDP2, {dist.get_world_size()} ranks, recompute {s}: {STEPS} steps within {worst:.1e} of one process")
    del mesh, trained
    release_dtensor_caches()
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
