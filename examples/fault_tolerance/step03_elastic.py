"""Elastic training: the job shrinks when a node leaves and grows when one joins, and each time goes on
from a sharded (DCP) checkpoint, resharded for the new world size, with the same global batch.

    torchrun --standalone --nproc_per_node=2 examples/fault_tolerance/step03_elastic.py --ckpt-dir ckpt-elastic

Every step trains on 16 samples, at any world size: each rank accumulates 16 / (4 x ranks) micro-batches
of 4. Rank 0 prints each start with its world size, and at the end checks the weights against one
process trained on the same batches. The recovery page runs it on two nodes, loses one, and adds it back.
"""

import argparse
import gc
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

GLOBAL_BATCH, MICRO_BATCH = 16, 4  # samples per step, whatever the world size; samples per forward pass
STEPS, CKPT_EVERY, LR = 40, 5, 0.05
STOP = threading.Event()  # set by SIGTERM, which torchrun sends before it restarts the workers


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
    p.add_argument("--ckpt-dir", required=True, help="the checkpoint folder, one that every node reads and writes")
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step, as a bigger model would")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if GLOBAL_BATCH % (world * MICRO_BATCH):
        usage_error(f"{world} ranks cannot share a global batch of {GLOBAL_BATCH} in micro-batches of {MICRO_BATCH}")
    if not 0 <= args.step_seconds <= 60:
        usage_error("--step-seconds must be in 0..60")
    return args


def build(mesh=None):
    """The model, sharded over `mesh` with FSDP2 (or whole, for the one-process reference)."""
    torch.manual_seed(0)  # the same initial weights on every rank, at every world size
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    if mesh is not None:
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s samples: a function of the step alone, so that any world size trains on the same ones."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 16, generator=g)
    return x, x[:, :1] * x[:, 1:2] + 0.1 * torch.randn(GLOBAL_BATCH, 1, generator=g)


# --8<-- [start:step]
def train_step(model, opt, step: int, device, group) -> int:
    """One optimizer step on the global batch: this rank's share, in micro-batches. Returns the
    samples that every rank together trained on (summed on `group`, a gloo group), which must be
    GLOBAL_BATCH at any world size."""
    rank, world = dist.get_rank(), dist.get_world_size()
    accumulation = GLOBAL_BATCH // (world * MICRO_BATCH)  # 2 on 2 ranks, 4 on 1: the global batch stays
    x, y = global_batch(step)
    mine = slice(rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world)
    for i, (xb, yb) in enumerate(zip(x[mine].split(MICRO_BATCH), y[mine].split(MICRO_BATCH))):
        model.set_requires_gradient_sync(i == accumulation - 1)  # reduce-scatter once, after the last
        # FSDP averages gradients over ranks: scale so that the sum is the mean over the global batch.
        loss = nn.functional.mse_loss(model(xb.to(device)), yb.to(device), reduction="sum") * world / GLOBAL_BATCH
        loss.backward()
    opt.step()
    opt.zero_grad()
    samples = torch.tensor([x[mine].shape[0]])  # on the CPU: a count, summed on the gloo group
    dist.all_reduce(samples, group=group)
    return int(samples.item())


# --8<-- [end:step]


# --8<-- [start:checkpoint]
def save(model, opt, step: int, history: list, folder: Path) -> None:
    """Each rank writes its own shards into a new folder; rank 0 renames it into place once all have."""
    model_state, optim_state = get_state_dict(model, opt)
    tmp = folder / f"step_{step:06d}.tmp"
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp)
    if dist.get_rank() == 0:
        (tmp / "progress.json").write_text(json.dumps({"step": step, "history": history}))
        tmp.rename(folder / f"step_{step:06d}")  # atomic: a checkpoint is whole, or not there
        for old in sorted(folder.glob("step_??????"))[:-2]:  # keep the newest two
            shutil.rmtree(old)
    dist.barrier()


def load_latest(model, opt, folder: Path) -> tuple[int, list]:
    """The newest whole checkpoint, whatever world size wrote it: DCP reshards it for this one."""
    done = sorted(folder.glob("step_??????"))
    if not done:
        return 0, []
    model_state, optim_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=done[-1])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    progress = json.loads((done[-1] / "progress.json").read_text())
    return progress["step"], progress["history"]


# --8<-- [end:checkpoint]


def stop_requested(group) -> bool:
    """Whether any rank got SIGTERM: the largest flag wins, so every rank stops at the same step."""
    flag = torch.tensor([1.0 if STOP.is_set() else 0.0])  # on the CPU, for the gloo group
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def train(args: argparse.Namespace, device: torch.device) -> None:
    world, folder = dist.get_world_size(), Path(args.ckpt_dir)
    folder.mkdir(parents=True, exist_ok=True)
    model, opt = build(init_device_mesh(device.type, (world,)))
    # Answers read on the host every step (the sample count, the stop flag) meet on the CPU, on a gloo
    # group: a CUDA tensor read with .item() would make the CPU wait for the GPU at every step.
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))
    signal.signal(signal.SIGTERM, lambda signum, frame: STOP.set())  # act on it between steps
    # --8<-- [start:resume]
    step, history = load_latest(model, opt, folder)
    history.append([step, world])  # the world size from this step on
    accumulation = GLOBAL_BATCH // (world * MICRO_BATCH)
    log(f"start at step {step} on {world} rank{'s' * (world > 1)}: {GLOBAL_BATCH} samples a step, "
        f"{accumulation} micro-batch{'es' * (accumulation > 1)} of {MICRO_BATCH} per rank")  # fmt: skip
    # --8<-- [end:resume]
    while step < STEPS:
        assert train_step(model, opt, step, device, group) == GLOBAL_BATCH, "the global batch changed"
        step += 1
        stopping = step < STEPS and stop_requested(group)
        if step % CKPT_EVERY == 0 or stopping:
            save(model, opt, step, history, folder)
        if stopping:  # torchrun restarts the workers: a node left or joined. Nothing is lost.
            log(f"SIGTERM: saved a checkpoint at step {step}; stopping")
            sys.exit(128 + signal.SIGTERM)
        time.sleep(args.step_seconds)

    # --8<-- [start:self_check]
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    whole = get_state_dict(model, opt, options=options)[0]  # gathered on every rank; rank 0 checks
    if dist.get_rank() == 0:
        ref, ref_opt = build()  # one process, the whole global batch in one pass, every step
        for s in range(STEPS):
            x, y = global_batch(s)
            nn.functional.mse_loss(ref(x), y).backward()
            ref_opt.step()
            ref_opt.zero_grad()
        for name, p in ref.state_dict().items():
            # Float32 sums in another order (other micro-batches, another number of ranks) differ in the
            # last bits, and 40 steps of momentum carry that along: 1e-5 apart, where a wrong scale is far more.
            torch.testing.assert_close(whole[name], p, rtol=1e-5, atol=1e-5)
        sizes = " -> ".join(f"{w} from step {s}" for s, w in history)
        log(f"trained {STEPS} steps of {GLOBAL_BATCH} samples on world sizes {sizes}")
        log("the weights match one process trained on the same batches (rtol 1e-5)")
        log("self-check passed")
    dist.barrier()
    # --8<-- [end:self_check]
    # The checkpoints stay, the newest two, the last step's among them: it is the trained model, and a
    # launch in the same folder resumes from it with nothing left to train.


def run(args: argparse.Namespace, device: torch.device) -> None:
    try:
        train(args, device)
    except BaseException as e:
        # A failed step (a lost node) would keep the sharded model alive in the traceback, past the
        # group's teardown, and gloo's threads would then abort the exit: free it first.
        traceback.clear_frames(e.__traceback__)
        raise
    finally:
        release_dtensor_caches()  # so that the setup's destroy_process_group can free the group


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
