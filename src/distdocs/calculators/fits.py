"""The cost model fed from measurements: α and β fitted to the allreduce timings of a benchmark run,
and a workload and network calibrated on a scaling run, from records in memory or saved by
`distdocs bench NAME --save` (distdocs.calculators.costmodel is the model they feed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from distdocs.calculators.costmodel import GRADIENT_BYTES, Network, Workload, allreduce_terms


@dataclass(frozen=True)
class Fit:
    """α and β fitted to measured allreduce times, and how well they fit."""

    network: Network
    relative_rms: float  # root mean square of (predicted - measured) / measured
    points: int


def fit_alpha_beta(
    records: list[dict],
    impl: str = "gloo",
    algorithm: str = "ring",
    world_size: int | None = None,
    link: str = "loopback",
) -> Fit:
    """Least-squares α and β from allreduce timings: the records of `distdocs bench allreduce
    --json` (keys impl, world_size, bytes, time_s), those of `impl` (and of `world_size`, if given)
    only. Each time is weighted by its inverse, so that small and large messages count alike; α is
    kept at zero or above. Fit one world size at a time where ranks outnumber cores: sharing cores
    slows every message, which no α and β of the links describe. Records measured over dialled links
    (`bench allreduce --link RATE`) name their link; only those of `link` count."""
    rows = [
        r
        for r in records
        if r.get("impl") == impl
        and r.get("world_size", 1) > 1
        and world_size in (None, r.get("world_size"))
        and r.get("link", "loopback") == link
    ]
    if len({r["bytes"] for r in rows}) < 2:
        raise ValueError(f"records: fitting α and β needs {impl!r} timings at two sizes or more, got {len(rows)}")
    xs = []
    for r in rows:
        messages, factor = allreduce_terms(r["world_size"], algorithm)
        xs.append((messages / r["time_s"], factor * r["bytes"] / r["time_s"]))  # predicts 1 when exact
    # Normal equations of min Σ (a·x0 + b·x1 - 1)²; then α = 0 if the intercept came out negative.
    s00, s01, s11 = (sum(x[i] * x[j] for x in xs) for i, j in ((0, 0), (0, 1), (1, 1)))
    t0, t1 = sum(x[0] for x in xs), sum(x[1] for x in xs)
    det = s00 * s11 - s01 * s01
    alpha, beta = ((t0 * s11 - t1 * s01) / det, (t1 * s00 - t0 * s01) / det) if det else (0.0, 0.0)
    if alpha < 0 or not det:
        alpha, beta = 0.0, t1 / s11
    rms = math.sqrt(sum((alpha * x0 + beta * x1 - 1) ** 2 for x0, x1 in xs) / len(xs))
    return Fit(Network(alpha, beta, f"fitted to {impl} allreduce timings"), rms, len(xs))


def load_fit(path: str, impl: str = "gloo", world_size: int | None = None) -> Fit:
    """fit_alpha_beta() of a saved `distdocs bench allreduce --json` (or --save) file."""
    try:
        with open(path) as f:
            records = json.load(f)["records"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a saved allreduce benchmark ({e})") from None
    fit = fit_alpha_beta(records, impl, "ring", world_size)
    where = f", world size {world_size}" if world_size else ""
    return Fit(
        Network(fit.network.alpha, fit.network.beta, f"fit to {path} ({impl}{where})"), fit.relative_rms, fit.points
    )


def workload_from_scaling(one: dict) -> Workload:
    """The workload of a 1-rank `distdocs bench scaling` record: its whole DDP step counts as
    computation (what DDP does at one rank it does at every size), and the sync is not overlapped,
    as on CPU ranks, whose one core does both."""
    k = one["accumulation"]
    return Workload(
        params=one["gradient_bytes"] / GRADIENT_BYTES["fp32"],
        compute_per_sample=one["step_s"] / (one["batch_per_rank"] * k),
        micro_batch=one["batch_per_rank"],
        accumulation=k,
        overlap=False,
    )


def from_scaling(records: list[dict], model: str, accumulation: int = 1) -> tuple[Workload, Network]:
    """A workload and network calibrated on a saved `distdocs bench scaling` run. The whole 1-rank
    step counts as compute: what DDP does at one rank (copying gradients into buckets, among
    others) it does at every size. The links are those that make the 2-rank step as much longer
    as measured. That extra time is what the backward pass did not hide, so the workload does not
    overlap it again."""
    mine = {r["world_size"]: r for r in records if r.get("model") == model and r.get("accumulation") == accumulation}
    if not {1, 2} <= mine.keys():
        raise ValueError(f"records: no {model!r} steps with accumulation {accumulation} at 1 and 2 ranks")
    one, two = mine[1], mine[2]
    sync = two["step_s"] - one["step_s"]
    if not sync > 0:
        raise ValueError(f"records: the 2-rank {model!r} step is no longer than the 1-rank one; nothing to calibrate")
    work = workload_from_scaling(one)
    # At 2 ranks the ring's bytes factor is 1 and latency is folded into β: β = sync / S.
    return work, Network(0.0, sync / one["gradient_bytes"], f"this machine's measured {model} sync at 2 ranks")


def load_scaling(path: str, model: str, accumulation: int = 1) -> tuple[Workload, Network]:
    """from_scaling() of a saved `distdocs bench scaling --json` (or --save) file."""
    try:
        with open(path) as f:
            records = json.load(f)["records"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a saved scaling benchmark ({e})") from None
    return from_scaling(records, model, accumulation)
