"""Pipeline stages as emulated accelerators: each stage's forward and backward of a micro-batch is a
wait, its activations and their gradients real messages between the stages' ranks over the link
emulated in the ranks (distdocs.lab.wire). So a schedule's bubble is measured where only the schedule
and the link set it, and the compute is known: the pipeline lesson's (p - 1)/(m + p - 1), live.

    pipeline_idle(rank, world_size, stages=4, microbatches=8, schedule="1f1b")   # on a World of 4

Compute is a wait; the bytes, the messages, their order and the link are real.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from distdocs.lab.wire import LinkSpec, Wire

SCHEDULES = ("gpipe", "1f1b")


def schedule(name: str, stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """The order in which `stage` of `stages` runs its forwards ("F", micro-batch) and backwards ("B").
    GPipe: every forward, then every backward, last first. 1F1B (PipeDream-Flush): p - 1 - stage
    forwards to fill the pipeline, then one forward and one backward in turn, then the backwards left;
    fewer micro-batches in flight, the same bubble."""
    if name == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    if name != "1f1b":
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, not {name!r}")
    warm = min(stages - 1 - stage, m)
    steady = [op for i in range(m - warm) for op in (("F", warm + i), ("B", i))]
    return [("F", i) for i in range(warm)] + steady + [("B", i) for i in range(m - warm, m)]


def _busy(seconds: float, spans: list) -> None:
    """The stage computes for `seconds`: a wait, kept as a span of this stage's own timestamps."""
    start = time.perf_counter()
    while (left := start + seconds - time.perf_counter()) > 0:
        time.sleep(left)
    spans.append((start, time.perf_counter()))


def pipeline_step(
    rank: int, stages: int, m: int, name: str, forward_s: float, backward_s: float, activation_bytes: int, wire: Wire
) -> list[tuple[float, float]]:
    """One training step of stage `rank` (ranks 0..stages-1, one stage each): its schedule's forwards
    and backwards, receiving each micro-batch's activation from the stage before and its gradient from
    the stage after. Returns when this stage computed."""
    spans, sending = [], []
    buffer = torch.empty(activation_bytes // 4)
    for op, _ in schedule(name, rank, stages, m):
        if op == "F":
            if rank > 0:
                wire.recv(buffer, rank - 1)
            _busy(forward_s, spans)
            if rank < stages - 1:
                sending.append(wire.send(buffer.clone(), rank + 1))
        else:
            if rank < stages - 1:
                wire.recv(buffer, rank + 1)
            _busy(backward_s, spans)
            if rank > 0:
                sending.append(wire.send(buffer.clone(), rank - 1))
    for request in sending:
        request.wait()
    return spans


def pipeline_idle(
    rank: int,
    world_size: int,
    points: list[tuple[int, int, str]],
    link: str,
    forward_s: float,
    backward_s: float,
    activation_bytes: int,
    steps: int,
) -> list[dict]:
    """On every rank of a World: each (stages, micro-batches, schedule) point, `steps` times after a
    warm-up step, on the world's first `stages` ranks. Returns, on rank 0, one record per point: each
    stage's idle share of every step (1 - its compute / the step, the step from a common start to the
    last stage's end) and, of the last step, when each stage computed, in seconds from its start."""
    wire = Wire(LinkSpec(link), rank)
    records = []
    for stages, m, name in points:
        idle, spans = [], []
        for _ in range(1 + steps):
            dist.barrier()
            start = time.perf_counter()
            mine = (
                pipeline_step(rank, stages, m, name, forward_s, backward_s, activation_bytes, wire)
                if rank < stages
                else []
            )
            ends = [None] * world_size
            dist.all_gather_object(ends, (mine[-1][1] if mine else start, sum(b - a for a, b in mine), mine))
            step = max(end for end, _, _ in ends[:stages]) - start
            idle.append([1 - busy / step for _, busy, _ in ends[:stages]])
            spans = [[(a - start, b - start) for a, b in stage] for _, _, stage in ends[:stages]]
        records.append({
            "stages": stages, "microbatches": m, "schedule": name, "idle": idle[1:], "spans": spans,
            "bubble": (stages - 1) / (m + stages - 1), "forward_s": forward_s, "backward_s": backward_s,
            "activation_bytes": activation_bytes, "link": link,
        })  # fmt: skip
    return records
