"""The schedules real jobs use: interleaved 1F1B and two zero-bubble schedules, with two stages on each
rank, beside GPipe and 1F1B with one, all from torch.distributed.pipelining.

    torchrun --standalone --nproc_per_node=2 examples/pipeline_parallel/step03_schedules.py

Rank 0 prints, for each schedule, the bubble formula beside each rank's measured idle share of a step,
the activations each rank held at its peak, and the sends; each schedule trains as one process does.
`--save PATH` also writes what each rank computed when, in the last step, as JSON for the page's figure.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleZBVZeroBubble,
)

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

LAYERS, BATCH = 8, 240  # the model's blocks, and the batch that a step splits into micro-batches
LR = 0.05

# --8<-- [start:schedules]
# Which stages each rank holds, for p ranks: one each, a loop (rank r holds r and r + p: a micro-batch
# goes around the ranks twice) or a V (rank 0 holds the first and the last stage: down and back up).
ONE, LOOP, V = (lambda r, p: [r]), (lambda r, p: [r, r + p]), (lambda r, p: [r, 2 * p - 1 - r])
SCHEDULES = {
    "GPipe": (ScheduleGPipe, ONE),
    "1F1B": (Schedule1F1B, ONE),
    "Interleaved1F1B": (ScheduleInterleaved1F1B, LOOP),
    "InterleavedZeroBubble": (ScheduleInterleavedZeroBubble, LOOP),
    "ZBVZeroBubble": (ScheduleZBVZeroBubble, V),
}
# --8<-- [end:schedules]


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def make_model(width: int) -> nn.Sequential:
    torch.manual_seed(0)  # the same weights on every rank and in the reference
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(LAYERS)])


def batches(args, device):
    g = torch.Generator().manual_seed(1)  # the same batches on every rank: the first stage feeds x, the last y
    for _ in range(args.steps):
        x = torch.randn(BATCH, args.width, generator=g)
        yield x.to(device), torch.sin(x).to(device)


def bubble_formula(p: int, m: int, v: int) -> float:
    """The idle share of a step when forward and backward take the same time on every stage: p - 1
    chunk-times of filling and draining, against v * m chunks of work (Narayanan et al. 2021)."""
    return (p - 1) / (v * m + p - 1)


# --8<-- [start:measure]
def synchronize(device: torch.device) -> None:
    """On a GPU, wait for the work queued on this rank's compute stream: the GPU runs behind the host.
    Only that stream: nccl sends and receives on streams of its own, and waiting for a peer is idle."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class Meter:
    """What a rank's stages do in a step: time computing, activation sends, and micro-batches in flight
    (forward done, backward not yet: each holds its saved activations)."""

    def __init__(self, stages: list[PipelineStage], device: torch.device) -> None:
        self.device, self.in_flight, self.peak = device, 0, 0
        self.start_step()
        for stage in stages:  # wrap the methods that every schedule calls on a stage
            stage.forward_one_chunk = self.timed(stage.forward_one_chunk, stage.stage_index, "F")
            stage.backward_one_chunk = self.timed(stage.backward_one_chunk, stage.stage_index, "B")
            stage.backward_weight_one_chunk = self.timed(stage.backward_weight_one_chunk, stage.stage_index, "W")
            stage.get_fwd_send_ops = self.counted(stage.get_fwd_send_ops)

    def start_step(self) -> None:
        self.busy_s, self.sends, self.spans, self.t0 = 0.0, 0, [], time.perf_counter()

    def timed(self, compute, stage: int, kind: str):
        def wrapper(chunk: int, *args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            try:
                return compute(chunk, *args, **kwargs)
            finally:
                synchronize(self.device)
                end = time.perf_counter()
                self.busy_s += end - start
                # A zero-bubble schedule splits backward: the input gradient first (full_backward=False,
                # "I"), the weight gradient later ("W"). The activations stay until "W" frees them.
                done = "I" if kind == "B" and not kwargs.get("full_backward", True) else kind
                self.spans.append((start - self.t0, end - self.t0, done, stage, chunk))
                if done != "I":
                    self.in_flight += 1 if kind == "F" else -1
                    self.peak = max(self.peak, self.in_flight)

        return wrapper

    def counted(self, send_ops):
        def wrapper(*args, **kwargs):
            ops = send_ops(*args, **kwargs)
            self.sends += len(ops)  # none when the next stage is on this rank
            return ops

        return wrapper


def saved_bytes(layers: nn.Module, x: torch.Tensor) -> int:
    """Bytes one forward keeps for backward: each saved storage once (the stage keeps its input x too),
    the weights not counted."""
    skip = {t.untyped_storage().data_ptr() for t in layers.parameters()}
    kept = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layers(x)  # alive until the count is taken
    del out
    return sum(kept.values())


# --8<-- [end:measure]


def run_schedule(name: str, args, device) -> tuple[dict, list[tuple]]:
    """args.steps steps of one schedule; this rank's measurements and its trained stages' parameters."""
    rank, p, m = dist.get_rank(), dist.get_world_size(), args.microbatches
    schedule_class, place = SCHEDULES[name]
    mine = place(rank, p)
    n_stages = p * len(mine)
    model, per = make_model(args.width).to(device), LAYERS // n_stages
    parts = {i: model[i * per : (i + 1) * per] for i in mine}
    # --8<-- [start:build]
    stages = [PipelineStage(parts[i], stage_index=i, num_stages=n_stages, device=device) for i in mine]
    stage_arg = stages if len(stages) > 1 else stages[0]  # the multi-stage schedules take a list
    schedule = schedule_class(stage_arg, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    # --8<-- [end:build]
    meter = Meter(stages, device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    idle = []
    for step, (x, y) in enumerate(batches(args, device)):
        opt.zero_grad()
        dist.barrier()  # every rank starts the step together
        meter.start_step()
        start = meter.t0
        kwargs = {"target": y, "losses": []} if n_stages - 1 in mine else {}
        schedule.step(*([x] if 0 in mine else []), **kwargs)  # the first stage feeds x, the last takes y
        if device.type == "cuda":
            torch.cuda.synchronize()  # the GPU runs behind the host; wait for it before reading the clock
        dist.barrier()  # the step ends when every rank is done, as the formula counts it
        elapsed = time.perf_counter() - start
        opt.step()
        if step:  # the first step connects the ranks and allocates buffers
            idle.append(1 - meter.busy_s / elapsed)
    # The activations of one micro-batch in one stage, the unit that the schedule keeps in flight.
    chunk = saved_bytes(parts[mine[0]], torch.randn(BATCH // m, args.width, device=device, requires_grad=True))
    result = {
        "idle": statistics.median(idle),
        "peak": meter.peak,
        "bytes": meter.peak * chunk,
        "sends": meter.sends,
        "stages": len(mine),
        "spans": meter.spans,  # the last step's
    }
    return result, [(i, [p.detach() for p in parts[i].parameters()]) for i in mine]


def train_one_process(args, device) -> nn.Sequential:
    model = make_model(args.width).to(device)  # the whole model, the whole batch
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in batches(args, device):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=int, default=4, help="micro-batches per step (default: 4)")
    parser.add_argument("--width", type=int, default=512, help="the layers' width (default: 512)")
    parser.add_argument("--steps", type=int, default=5, help="steps of each schedule, the first untimed (default: 5)")
    parser.add_argument("--save", help="also write the measurements and the last step's timeline to this JSON file")
    args = parser.parse_args()
    p, m = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE)), args.microbatches
    if LAYERS % (2 * p) or m < 1 or BATCH % m:
        usage_error(
            f"{LAYERS} layers need 2 stages on each rank and {BATCH} samples must split into m: got {p} ranks, m = {m}"
        )
    if args.width < 1 or args.steps < 2:
        usage_error(f"--width must be positive and --steps at least 2, got {args.width} and {args.steps}")
    # torch's ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble run the micro-batches in
    # max(1, m // p) equal rounds (ScheduleZBVZeroBubble has no such rule).
    if m % max(1, m // p):
        fits = [n for n in range(1, 2 * m) if n % max(1, n // p) == 0 and BATCH % n == 0]
        below, above = max(n for n in fits if n < m), min(n for n in fits if n > m)
        usage_error(
            f"torch's interleaved schedules run m micro-batches in max(1, m // p) equal rounds: {m} does not "
            f"split into {max(1, m // p)} on {p} ranks; try {below} or {above}"
        )
    return args


def run(args: argparse.Namespace, device: torch.device) -> None:
    p, m = dist.get_world_size(), args.microbatches
    reference = train_one_process(args, device)
    log(f"p={p} ranks, m={m} micro-batches of {BATCH // m}, {LAYERS} layers of width {args.width}")
    log("schedule               stages  bubble   idle (rank 0, 1)  peak activations (rank 0, 1)  activation")
    log("                       a rank  formula  measured          micro-batches  KiB             sends a step")
    saved = {}
    for name in SCHEDULES:
        result, trained = run_schedule(name, args, device)
        per = LAYERS // (p * result["stages"])
        for i, params in trained:
            # float32 defaults: the micro-batches' gradients add up in another order than one batch's.
            for a, b in zip(params, reference[i * per : (i + 1) * per].parameters()):
                torch.testing.assert_close(a, b)
        everyone = [None] * p
        dist.all_gather_object(everyone, result)
        formula = bubble_formula(p, m, result["stages"])
        idle = ", ".join(f"{r['idle']:.0%}" for r in everyone)
        # In micro-batches through all of a rank's layers: a chunk of a rank with v stages is 1/v of them.
        peak = ", ".join(f"{r['peak'] / r['stages']:g}" for r in everyone)
        kib = ", ".join(f"{r['bytes'] // 1024}" for r in everyone)
        sends = sum(r["sends"] for r in everyone)
        log(f"{name:<22} {result['stages']:>6} {formula:>8.0%}  {idle:<16}  {peak:<13}  {kib:<14}  {sends:>5}")
        saved[name] = {"stages": result["stages"], "formula": formula, "ranks": everyone}
    log("every schedule trained the same weights as one process")
    if args.save and dist.get_rank() == 0:
        machine = {"machine": platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__}
        machine.update(ranks=p, date=datetime.date.today().isoformat())
        config = {"microbatches": m, "width": args.width, "layers": LAYERS, "batch": BATCH, "steps": args.steps}
        with open(args.save, "w") as f:
            json.dump({"machine": machine, "config": config, "schedules": saved}, f, indent=1)
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
