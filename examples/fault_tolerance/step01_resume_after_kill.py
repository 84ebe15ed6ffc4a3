"""Training that survives losing a rank: a checkpoint every few steps, and torchrun restarts the job
from the newest one. Each rank prints its pid: `kill -9` one from a second terminal (add
`--step-seconds 1` to have time), and the run still ends with the same weights as an uninterrupted
one, bit for bit. On SIGTERM, which a scheduler sends before it stops or preempts a job, every rank
saves a checkpoint at the next step and the run stops, to resume later.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 examples/fault_tolerance/step01_resume_after_kill.py

Its last line is weights_sha256=<hex>, a hash of the final parameters. A launch resumes from the
newest checkpoint in --ckpt-dir, which keeps the last three, the final step's among them.
It imports distdocs.training.checkpoint, which the failure-and-recovery page builds: `pip install -e .`.
"""

import argparse
import gc
import hashlib
import io
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import distdocs.training.checkpoint as checkpoint

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 20

# A scheduler stops a job with SIGTERM, then SIGKILL a grace period later: SLURM's KillWait, 30 s by
# default; Kubernetes' terminationGracePeriodSeconds, also 30. TIMEOUT_S is under it, so a rank whose
# peer is stuck or gone, and which therefore cannot save, has its collective fail in Python and leaves
# on its own, saying so, before SIGKILL would end it without a word. With a real job's longer timeout,
# SIGKILL ends such a rank.

SAMPLES, BATCH, EPOCHS = 512, 16, 2  # 512 / (2 ranks x 16) = 16 steps an epoch, 32 in all
STOP = threading.Event()  # set by SIGTERM; the training loop checks it after every step


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
    stop_on_sigterm()  # first of all: from here on, SIGTERM means "save and stop", not "die now"
    world = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    steps = EPOCHS * SAMPLES // (world * BATCH)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt-every", type=int, default=4, help="steps between checkpoints (default: 4)")
    p.add_argument("--ckpt-dir", default="checkpoints", help="where checkpoints go (default: checkpoints)")
    p.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="sleep after each step, as a bigger model would take (default: 0)",
    )
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank (default: 0)")
    args = p.parse_args()
    problems = []
    if args.ckpt_every < 1:
        problems.append("--ckpt-every must be at least 1")
    if not 0 <= args.step_seconds <= 60:
        problems.append("--step-seconds must be in 0..60")
    if not 0 <= args.workers <= 8:
        problems.append("--workers must be in 0..8")
    if problems:
        usage_error("; ".join(problems))
    try:
        checkpoint.check_writable(args.ckpt_dir)  # a bad folder fails now, not at the first save
    except checkpoint.CheckpointError as e:
        usage_error(str(e))
    args.steps = steps
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The process to kill, to try a failure by hand; on stderr, beside torchrun's own reports.
    print(f"[rank {rank}] pid {os.getpid()}", file=sys.stderr, flush=True)

    model, opt, sched, loader = build(device, args.workers)
    decisions = dist.new_group(backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))  # see stop_requested

    # --8<-- [start:resume]
    step, state = checkpoint.load_latest_checkpoint(args.ckpt_dir)
    if state is None:
        step = 0
    else:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        rng = torch.load(io.BytesIO(state["rng"][rank]), weights_only=True)
        checkpoint.restore_rng_states(rng)  # this rank's own generators
    log(f"attempt {attempt}: {'resumed from step ' + str(step) if step else 'starting at step 0'}")
    # --8<-- [end:resume]
    resumed, state = state is not None, None  # keep the answer, free the checkpoint's memory
    try:
        finished = train(model, opt, sched, loader, step, device, args, decisions)
    except BaseException as e:
        # A failed step (a lost peer, say) would keep the DDP model alive in the traceback, past the
        # group's teardown, and DDP's gloo thread would then abort the exit: free it first.
        traceback.clear_frames(e.__traceback__)
        del model, opt, sched, loader
        gc.collect()
        if STOP.is_set() and isinstance(e, RuntimeError):  # SIGTERM, and a collective failed: no save
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__  # a timeout, or a peer gone
            print(f"[rank {rank}] SIGTERM, and a peer did not answer: no checkpoint; leaving ({why})", file=sys.stderr)
            sys.exit(128 + signal.SIGTERM)
        raise
    if not finished:
        # Stopped by SIGTERM, with a checkpoint on disk. Exit as a process that SIGTERM ended does, so
        # that neither torchrun nor the scheduler counts the run as finished.
        sys.exit(128 + signal.SIGTERM)

    # --8<-- [start:self_check]
    params = b"".join(p.detach().cpu().contiguous().numpy().tobytes() for p in model.parameters())
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, hashlib.sha256(params).hexdigest())
    assert len(set(digests)) == 1, "the ranks ended with different weights"
    if resumed:
        # This launch resumed: the same run, uninterrupted, in this process, must end exactly where
        # it did. (A lesson's check: it trains the whole run again, which a real job would not.)
        ref_model, ref_opt, ref_sched, ref_loader = build(device, args.workers)
        train(ref_model, ref_opt, ref_sched, ref_loader, 0, device, None)
        for p, q in zip(model.parameters(), ref_model.parameters()):
            assert torch.equal(p, q), "the resumed run ended elsewhere than an uninterrupted one"
        log("the final weights equal an uninterrupted run's, bit for bit")
    else:
        log(f"trained steps 0 to {args.steps - 1} in one attempt; every rank ends with the same weights")
    log("self-check passed")
    # --8<-- [end:self_check]
    log(f"weights_sha256={digests[0]}")


def build(device: torch.device, workers: int = 0):
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(SAMPLES, 32, generator=g), torch.randn(SAMPLES, 1, generator=g))
    sampler = DistributedSampler(data, shuffle=True, seed=0)  # the order depends only on seed and epoch
    # Its own generator: otherwise each new iterator draws from the global one, and a resumed run,
    # which starts an epoch's iterator again, would draw once more than an uninterrupted one.
    # Worker processes change when a batch is read, not which: the sampler alone says which samples.
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=workers, generator=torch.Generator())
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    torch.manual_seed(1000 + dist.get_rank())  # dropout differs per rank, and is restored per rank
    return model, opt, sched, loader


def train(model, opt, sched, loader, step: int, device, args, decisions=None) -> bool:
    """From `step` to the end; with `args`, checkpoint as the flags say and stop on SIGTERM, as the ranks
    agree on `decisions`, else neither. False if SIGTERM stopped it early, after a checkpoint."""
    steps_per_epoch = len(loader)
    total = EPOCHS * steps_per_epoch
    # --8<-- [start:train]
    while step < total:
        epoch, skip = divmod(step, steps_per_epoch)
        loader.sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if i < skip:  # the sampler position: batches this epoch already trained on
                continue
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            step += 1
            stopping = args is not None and step < total and stop_requested(decisions)
            if args and (step % args.ckpt_every == 0 or step == total or stopping):  # the last one too
                save(model, opt, sched, step, args)
            if stopping:
                log(f"SIGTERM: saved a checkpoint at step {step}; stopping")
                return False
            if args and args.step_seconds:
                time.sleep(args.step_seconds)
            if step == total:
                break
    # --8<-- [end:train]
    return True


# --8<-- [start:stop_on_sigterm]
def stop_on_sigterm() -> None:
    """SIGTERM sets STOP, which the loop reads between steps. Python runs a signal handler only between
    two bytecodes of the main thread: a rank that waits in a collective hears the signal when the
    collective returns, or when it fails, TIMEOUT_S after it began."""
    signal.signal(signal.SIGTERM, lambda signum, frame: STOP.set())


# --8<-- [end:stop_on_sigterm]


# --8<-- [start:stop_requested]
def stop_requested(group) -> bool:
    """Whether any rank got SIGTERM. The signal reaches ranks at different moments, so they agree on
    the step to stop at: one value each, the largest wins, and every rank sees the same answer. The
    flags meet on the CPU, on `group`, a gloo group: a CUDA flag read back with .item() after every
    step would make the CPU wait for the GPU, and stop it queueing the next step ahead."""
    flag = torch.tensor([1.0 if STOP.is_set() else 0.0])  # on the CPU, for the gloo group
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


# --8<-- [end:stop_requested]


# --8<-- [start:save]
def save(model, opt, sched, step: int, args) -> None:
    mine = io.BytesIO()
    torch.save(checkpoint.rng_states(), mine)
    rngs = [None] * dist.get_world_size()
    dist.all_gather_object(rngs, mine.getvalue())  # every rank's generators, as bytes, saved by rank 0
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "rng": rngs}
        checkpoint.save_checkpoint_atomic(state, args.ckpt_dir, step, keep=3)
    dist.barrier()  # nobody trains past a checkpoint that is not on disk yet


# --8<-- [end:save]


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
