"""SLURM brings a job back: the launch page's job script, submitted with sbatch to a cluster of network
namespaces (distdocs.slurm), with one of its nodes lost or the job preempted at a random moment.
Each moment is timed: the cluster's own from slurmctld's log, the job's from its output lines as
they arrive.

The events:
- `none`: the job runs through;
- `node-loss`: every process on the job's second node is SIGKILLed, slurmd among them;
- `preempt`: `scancel --batch --signal=USR1`, the warning SLURM sends before the time limit;
- `usr1-to-steps`: the same signal without --batch, to the job's steps: the classic mistake.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from distdocs.bench.harness import machine_line
from distdocs.cli import require
from distdocs.slurm import Cluster

REPO = Path(__file__).resolve().parents[3]
SCRIPT = "examples/multi_node/slurm_job.sh"
EXAMPLE = "examples/fault_tolerance/step01_resume_after_kill.py"
EVENTS = ("none", "node-loss", "preempt", "usr1-to-steps")
STEP_SECONDS = 0.3  # each training step sleeps this long, so that an event lands mid-run
DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
# The moments, each the first line after the event that matches: (where, pattern).
MARKS = {
    "node-loss": {
        "down": ("slurmctld", r"Nodes? (\S+) not responding, setting DOWN"),
        "requeued": ("slurmctld", r"Requeuing JobId={job}\b"),
        "allocated": ("slurmctld", r"sched: Allocate JobId={job} NodeList=(\S+)"),
        "resumed": ("output", r"attempt \d+: resumed from step (\d+)"),
    },
    "preempt": {
        "trapped": ("output", r"USR1 reached the batch shell"),
        "checkpoint": ("output", r"SIGTERM: saved a checkpoint at step (\d+)"),
        "requeued": ("slurmctld", r"Requeuing JobId={job}\b"),
        "allocated": ("slurmctld", r"sched: Allocate JobId={job} NodeList=(\S+)"),
        "resumed": ("output", r"attempt \d+: resumed from step (\d+)"),
    },
}
PHASES = {
    "node-loss": [
        ("down", "event", "slurmctld marks the silent node down"),
        ("requeued", "down", "the job's other steps are stopped, the job requeued"),
        ("allocated", "requeued", "the requeued job waits, then gets the nodes left"),
        ("resumed", "allocated", "torchrun starts, the group forms, the checkpoint loads"),
    ],
    "preempt": [
        ("checkpoint", "event", "the shell requeues; every rank saves on SIGTERM"),
        ("requeued", "checkpoint", "the steps exit, the job is requeued"),
        ("allocated", "requeued", "the requeued job waits, then gets nodes again"),
        ("resumed", "allocated", "torchrun starts, the group forms, the checkpoint loads"),
    ],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=3, help="runs of each event; medians (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="draws the moment of each event (default: 0)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(args.repeat >= 1, "--repeat must be at least 1")
    rng = random.Random(args.seed)
    records = []
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp) / "cluster") as cluster:
        for event in ("node-loss", "preempt"):
            for i in range(args.repeat):
                if progress:
                    progress(f"{event}, run {i + 1} of {args.repeat}")
                records.append(run_job(cluster, Path(tmp) / f"{event}-{i}", event, rng))
    return records


def job_env(ckpt_dir: Path, step_seconds: float = STEP_SECONDS) -> dict:
    """The variables a CPU cluster sets for the job script: the script's own, and sbatch's for the
    #SBATCH line that asks for GPUs."""
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TRAIN_SCRIPT": str(REPO / EXAMPLE),
        "CKPT_DIR": str(ckpt_dir),
        "NPROC_PER_NODE": "1",
        "SBATCH_GPUS_PER_NODE": "0",
        "TRAIN_ARGS": f"--step-seconds {step_seconds}" if step_seconds else "",
    }


def run_job(
    cluster: Cluster,
    workdir: Path,
    event: str,
    rng: random.Random,
    step_seconds: float = STEP_SECONDS,
    timeout_s: float = 300,
) -> dict:
    """Submit the job script from `workdir`, let the event happen between 1 and 5 s into training,
    and wait for the job to end. Returns its state, output, and each moment in s after the event."""
    if event not in EVENTS:
        raise ValueError(f"event {event!r}: expected one of {', '.join(EVENTS)}")
    (workdir / "logs").mkdir(parents=True)
    job = cluster.submit(REPO / SCRIPT, env=job_env(workdir / "ckpt", step_seconds), cwd=workdir)
    output = workdir / "logs" / f"distdocs-train-{job}.out"
    arrived: list[tuple[float, str]] = []  # (wall clock, line) of the job's output, as it arrives
    deadline = time.time() + timeout_s
    delay = round(rng.uniform(1, 5), 2)
    event_at = None
    nodes = ""
    info: dict = {}
    while True:
        text = output.read_text(errors="replace") if output.exists() else ""
        now = time.time()
        for line in text.splitlines()[len(arrived) :]:
            arrived.append((now, line))
        started = next((t for t, line in arrived if "attempt 0: starting at step 0" in line), None)
        if event_at is None and event != "none" and started and now >= started + delay:
            nodes = cluster.job(job)["NodeList"]
            event_at = time.time()
            if event == "node-loss":
                cluster.lose_node(cluster.hostnames(nodes)[1])  # not the first: it runs the batch shell
            else:
                cluster.client("scancel", *(["--batch"] if event == "preempt" else []), "--signal=USR1", str(job))
        info = cluster.job(job)
        if info["JobState"] in DONE and (event == "none" or event_at is not None):
            break
        if now > deadline:
            raise RuntimeError(f"job {job} ({event}) still {info['JobState']} after {timeout_s:.0f} s")
        time.sleep(0.1)
    time.sleep(0.3)  # the last lines
    text = output.read_text(errors="replace")
    for line in text.splitlines()[len(arrived) :]:
        arrived.append((time.time(), line))
    record = {
        "event": event,
        "job": job,
        "state": info["JobState"],
        "restarts": int(info.get("Restarts", 0)),
        "nodes_before": nodes or info["NodeList"],
        "nodes_after": info["NodeList"],
        "delay_s": delay if event != "none" else None,
        "output": text,
        "hash": next((m.group(1) for m in re.finditer(r"weights_sha256=(\w+)", text)), None),
    }
    if event in MARKS:
        record |= moments(cluster, job, event, event_at, arrived)
    return record


def moments(cluster: Cluster, job: int, event: str, event_at: float, arrived: list) -> dict:
    """When each mark of `event` came, in s after the event, and what it matched."""
    ctl = []
    for line in cluster.log("slurmctld").splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\] (.*)", line)
        if m:
            ctl.append((datetime.fromisoformat(m.group(1)).timestamp(), m.group(2)))
    seen, found = {}, {}
    for name, (where, pattern) in MARKS[event].items():
        regex = re.compile(pattern.format(job=job))
        lines = ctl if where == "slurmctld" else arrived
        hit = next(((t, m) for t, line in lines if t >= event_at - 0.01 and (m := regex.search(line))), None)
        if hit is None:
            raise RuntimeError(f"job {job} ({event}): no {where} line matched {regex.pattern!r}")
        seen[name] = hit[0] - event_at
        if hit[1].groups():
            found[name] = hit[1].group(1)
    record = {"moments_s": seen}
    if "checkpoint" in found:
        record["checkpoint_step"] = int(found["checkpoint"])
    record["resumed_from"] = int(found["resumed"])
    return record


def format_table(records: list[dict], machine: dict) -> str:
    lines = []
    for event, phases in PHASES.items():
        runs = [r for r in records if r["event"] == event]
        if not runs:
            continue
        what = "the job's second node SIGKILLed" if event == "node-loss" else "scancel --batch --signal=USR1"
        lines.append(machine_line(machine, f"SLURM 22.05, {what}, 1 to 5 s into training; medians of {len(runs)}"))
        lines.append(f"{'phase':<64} {'seconds':>8}")
        for later, earlier, text in phases:
            span = statistics.median(r["moments_s"][later] - r["moments_s"].get(earlier, 0.0) for r in runs)
            lines.append(f"{text:<64} {span:>8.2f}")
        total = statistics.median(r["moments_s"]["resumed"] for r in runs)
        lines.append(
            f"{'from the ' + ('kill' if event == 'node-loss' else 'signal') + ' to training again':<64} {total:>8.2f}"
        )
        lines.append("")
    return "\n".join(lines).rstrip()
