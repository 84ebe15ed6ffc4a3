"""The data-parallel training of the first lesson, run by DeepSpeed with ZeRO stage 1, 2 or 3.

    torchrun --standalone --nproc_per_node=2 examples/launchers/step02_deepspeed_zero.py --zero-stage 3

Needs `pip install deepspeed`; its first start compiles a small op (about a minute). Rank 0 prints
what each rank holds, and how far the trained weights are from torch DDP's, trained in the same run
on the same shards, and from one process trained on the full batches.
"""

import argparse
import contextlib
import gc
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# DeepSpeed picks its accelerator when it is imported; say which one instead of letting it guess.
os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
import deepspeed  # noqa: E402

# DeepSpeed 0.19 calls collectives that torch 2.13 renamed; the warning would repeat on every step.
warnings.filterwarnings("ignore", r".*(all_gather_into_tensor|reduce_scatter_tensor). is deprecated", FutureWarning)

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

GLOBAL_BATCH = 64
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_data(samples: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """The regression task of the data-parallel lesson, the same on every rank."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 16, generator=g, dtype=torch.float64)
    y = torch.sin(x @ torch.randn(16, 1, generator=g, dtype=torch.float64) / 4)
    return x.float(), (y + 0.1 * torch.randn(samples, 1, generator=g, dtype=torch.float64)).float()


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same weights on every rank
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def global_batches(x, y, device):
    """Every step's global batch, split into one shard per rank (the same list on every rank)."""
    n = dist.get_world_size()
    for _ in range(EPOCHS):
        for i in range(0, len(x), GLOBAL_BATCH):
            xb, yb = x[i : i + GLOBAL_BATCH].to(device), y[i : i + GLOBAL_BATCH].to(device)
            yield list(zip(xb.chunk(n), yb.chunk(n)))


def train_ddp(batches, device) -> nn.Module:
    """torch DDP on the same shards: the run to compare with."""
    ddp = DDP(make_model().to(device))
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    for shards in batches:
        x, y = shards[dist.get_rank()]
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return ddp.module


def train_one_process(batches, device) -> nn.Module:
    """One process, each step on the whole global batch."""
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for shards in batches:
        x, y = torch.cat([x for x, _ in shards]), torch.cat([y for _, y in shards])
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def local_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def run(device: torch.device, stage: int) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    batches = list(global_batches(*make_data(), device))

    # --8<-- [start:engine]
    config = {
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world_size,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,  # ZeRO is tested with Adam; SGD needs this
        "gradient_clipping": 0.0,  # DeepSpeed 0.19.3 and later clip to norm 1.0 unless told
    }
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    for shards in batches:
        x, y = shards[rank]  # this rank's shard of the global batch
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)  # gradients averaged across ranks (ZeRO-2/3: reduce-scattered)
        engine.step()  # each rank updates its shard; ZeRO-1/2 then all_gather the parameters
    # --8<-- [end:engine]

    # --8<-- [start:self_check]
    params = list(engine.module.parameters())
    # ZeRO-3 keeps 1/n of each parameter in `ds_tensor`; the module's tensors are empty placeholders.
    held_params = local_bytes(p.ds_tensor if stage == 3 else p for p in params)
    held_state = local_bytes(t for s in opt.optimizer.state.values() for t in s.values() if t.dim() > 0)
    every = [None] * world_size
    dist.all_gather_object(every, (held_params, held_state))
    whole = local_bytes(make_model().parameters())
    log(f"ZeRO-{stage}: {'bytes':>10} {'parameters':>11} {'momentum':>9}")
    log(f"{'the model, whole':>18} {whole:>11} {whole:>9}")
    for r, (p_bytes, s_bytes) in enumerate(every):
        log(f"{f'held by rank {r}':>18} {p_bytes:>11} {s_bytes:>9}")

    references = {"torch DDP": train_ddp(batches, device), "one process": train_one_process(batches, device)}
    with deepspeed.zero.GatheredParameters(params):  # ZeRO-3: all_gather the full weights to compare
        for name, reference in references.items():
            pairs = list(zip(params, reference.parameters()))
            log(f"max |DeepSpeed ZeRO-{stage} - {name}| = {max((p - q).abs().max().item() for p, q in pairs):.0e}")
            # float32 defaults (rtol 1.3e-6, atol 1e-5): the sums run in other orders than the
            # full batch's; at 2 ranks DeepSpeed and DDP both compute g0/2 + g1/2, the same bits.
            for p, q in pairs:
                torch.testing.assert_close(p, q)
                assert world_size != 2 or name != "torch DDP" or torch.equal(p, q)
    log("self-check passed")
    # --8<-- [end:self_check]
    engine.destroy()  # DeepSpeed's own teardown of the engine: it removes the hooks that hold the model


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero-stage", type=int, choices=[1, 2, 3], default=1)
    return parser.parse_args()


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
    # DeepSpeed logs to stdout, and prints a build line on every rank: send both to stderr.
    for handler in deepspeed.utils.logger.handlers:
        handler.setStream(sys.stderr)
    with contextlib.redirect_stdout(sys.stderr):
        # DeepSpeed's way in: it calls init_process_group with torchrun's environment.
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(device, args.zero_stage)  # the work, in a function: what it builds is freed when it returns
    finally:
        gc.collect()  # DeepSpeed's engine sits in reference cycles that hold the group: free them first
        # DeepSpeed's teardown: it destroys the group and drops the references DeepSpeed keeps to it.
        deepspeed.comm.destroy_process_group()  # also when run() raises


if __name__ == "__main__":
    main()
