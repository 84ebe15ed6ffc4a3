"""SLURM brings a job back: the launch page's job script, submitted with sbatch to a cluster of network
namespaces (distdocs.lab.slurm), with one of its nodes lost or the job preempted at a random moment.
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
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from distdocs.arguments import require
from distdocs.bench.harness import machine_line
from distdocs.lab.slurm import Cluster, SlurmError, check_can_run

REPO = Path(__file__).resolve().parents[3]
SCRIPT = "examples/multi_node/slurm_job.sh"
EXAMPLE = "examples/fault_tolerance/step01_resume_after_kill.py"
EVENTS = ("none", "node-loss", "preempt", "usr1-to-steps")
# The commands, as the multi-node page shows them; its tests check that they are these. A CPU node
# has no GPU for the #SBATCH line that asks for them, and runs one process.
SUBMIT = "SBATCH_GPUS_PER_NODE=0 NPROC_PER_NODE=1 CKPT_DIR=checkpoints sbatch examples/multi_node/slurm_job.sh"
SLOW = "TRAIN_ARGS=--step-seconds=0.3 "  # each step sleeps 0.3 s, so that an event lands mid-run
# The launch page's own script under the template: the converted script, which keeps no checkpoints.
CONVERTED = "examples/convert/step02_ddp.py"
CONVERTED_SUBMIT = (
    f"TRAIN_SCRIPT={CONVERTED} CKPT_DIR= TRAIN_ARGS=--out=model.pt SBATCH_GPUS_PER_NODE=0 NPROC_PER_NODE=1 "
    "sbatch examples/multi_node/slurm_job.sh"
)
# The settings that bound recovery, as the page asks the cluster for them.
CONFIG = "scontrol show config | grep -E 'KillWait|SlurmdTimeout|PreemptMode|SchedulerParameters'"
# SLURM's defaults for the three timers that distdocs.lab.slurm shortens, in seconds (slurm.conf(5), 22.05).
SLURM_DEFAULTS_S = {"SlurmdTimeout": 300, "cred_expire": 120, "sched_interval": 60}
COMMANDS = {
    "preempt": "scancel --batch --signal=USR1 --name=distdocs-train",
    "usr1-to-steps": "scancel --signal=USR1 --name=distdocs-train",
}
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
    parser.add_argument(
        "--events", default="node-loss,preempt", help="which, comma-separated (default: node-loss,preempt)"
    )
    parser.add_argument(
        "--until-resumed",
        action="store_true",
        help="cancel each job once it trains again, rather than let it finish: a soak that counts the "
        "saves on the signal, not the final weights",
    )


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(args.repeat >= 1, "--repeat must be at least 1")
    events = args.events.split(",")
    require(set(events) <= set(PHASES), f"--events: choose from {', '.join(PHASES)}")
    try:
        check_can_run()
    except SlurmError as e:
        require(False, str(e))
    rng = random.Random(args.seed)
    records = []
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp) / "cluster") as cluster:
        for event in events:
            for i in range(args.repeat):
                if progress:
                    progress(f"{event}, run {i + 1} of {args.repeat}")
                run = run_job(cluster, Path(tmp) / f"{event}-{i}", event, rng, until_resumed=args.until_resumed)
                records.append(run)
                if progress and run.get("missing"):
                    progress(f"{event}, run {i + 1}: no {' or '.join(run['missing'])} line")
    return records


def run_job(
    cluster: Cluster,
    workdir: Path,
    event: str,
    rng: random.Random,
    slow: bool = True,
    timeout_s: float = 300,
    submit: str = "",
    example: str = EXAMPLE,
    until_resumed: bool = False,
) -> dict:
    """Submit the job script with SUBMIT (with `slow`, SLOW first), or `submit`, from `workdir`, laid
    out as the repository with the job script and `example`, let the event happen between 1 and 5 s
    into training, and wait for the job to end (with `until_resumed`, scancel it once it trains again
    after the event). Returns its state, output, and each moment in s after
    the event."""
    if event not in EVENTS:
        raise ValueError(f"event {event!r}: expected one of {', '.join(EVENTS)}")
    for path in (SCRIPT, example):  # what the commands name, where they name it
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, workdir / path)
    submit = submit or (SLOW + SUBMIT if slow else SUBMIT)
    job = int(re.search(r"Submitted batch job (\d+)", shell(cluster, submit, workdir)).group(1))
    output = workdir / f"distdocs-train-{job}.out"
    arrived: list[tuple[float, str]] = []  # (wall clock, line) of the job's output, as it arrives
    deadline = time.time() + timeout_s
    delay = round(rng.uniform(1, 5), 2)
    event_at = None
    cancelled = False
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
                lost = cluster.hostnames(nodes)[1]  # not the first: it runs the batch shell
                cluster.lose_node(lost)
            else:
                shell(cluster, COMMANDS[event], workdir)
        if until_resumed and event_at and not cancelled:
            if any(t >= event_at and "resumed from step" in line for t, line in arrived):
                shell(cluster, f"scancel {job}", workdir)
                cancelled = True
        info = cluster.job(job)
        if info["JobState"] in DONE and (event == "none" or event_at is not None):
            break
        if now > deadline:
            raise RuntimeError(f"job {job} ({event}) still {info['JobState']} after {timeout_s:.0f} s")
        time.sleep(0.1)
    if event == "node-loss":
        cluster.restore_node(lost)  # for the next job
    time.sleep(0.3)  # the last lines
    text = output.read_text(errors="replace")
    for line in text.splitlines()[len(arrived) :]:
        arrived.append((time.time(), line))
    record = {
        "event": event,
        "commands": [submit] + ([COMMANDS[event]] if event in COMMANDS else []),
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


def shell(cluster: Cluster, command: str, cwd: Path) -> str:
    """`command`, exactly as written, run by bash on the controller from `cwd`; its stdout."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # torchrun, for the job
    return cluster.client("bash", "-c", command, env={"PATH": path}, cwd=cwd)


def moments(cluster: Cluster, job: int, event: str, event_at: float, arrived: list) -> dict:
    """When each mark of `event` came, in s after the event, and what it matched; `missing` names the
    marks that never came (a preempted job whose ranks did not save, say)."""
    ctl = []
    for line in cluster.log("slurmctld").splitlines():
        m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\] (.*)", line)
        if m:
            ctl.append((datetime.fromisoformat(m.group(1)).timestamp(), m.group(2)))
    seen, found, missing = {}, {}, []
    for name, (where, pattern) in MARKS[event].items():
        regex = re.compile(pattern.format(job=job))
        lines = ctl if where == "slurmctld" else arrived
        hit = next(((t, m) for t, line in lines if t >= event_at - 0.01 and (m := regex.search(line))), None)
        if hit is None:
            missing.append(name)
            continue
        seen[name] = hit[0] - event_at
        if hit[1].groups():
            found[name] = hit[1].group(1)
    record = {"moments_s": seen, "missing": missing}
    if "checkpoint" in found:
        record["checkpoint_step"] = int(found["checkpoint"])
    if "resumed" in found:
        record["resumed_from"] = int(found["resumed"])
    return record


def format_table(records: list[dict], machine: dict) -> str:
    lines = []
    for event, phases in PHASES.items():
        every = [r for r in records if r["event"] == event]
        runs = [r for r in every if not r.get("missing")]  # the phases of the runs in which every mark came
        if not every:
            continue
        what = "the job's second node SIGKILLed" if event == "node-loss" else "scancel --batch --signal=USR1"
        lines.append(machine_line(machine, f"SLURM 22.05, {what}, 1 to 5 s into training; medians of {len(runs)}"))
        for name in dict.fromkeys(name for r in every for name in r.get("missing", [])):
            count = sum(name in r.get("missing", []) for r in every)
            lines.append(f"runs with no {name} line: {count} of {len(every)}")
        if not runs:
            lines.append("")
            continue
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


def plot(records: list[dict], machine: dict) -> str:
    """One bar per event, from the event to training again, split into its phases (medians)."""
    from distdocs.figures import pyplot, to_svg

    events = [e for e in PHASES if any(r["event"] == e for r in records)]
    fig, ax = pyplot().subplots(figsize=(9.6, 1.9 + 0.6 * len(events)))
    kinds = [  # the phases of both events, by what they are
        ("C3", "node marked down / every rank saves on SIGTERM"),
        ("C1", "the job's steps stopped, the job requeued"),
        ("0.65", "waiting in the queue (cred_expire, the scheduler's pass)"),
        ("C0", "torchrun starts, the group forms, the checkpoint loads"),
    ]
    for y, event in enumerate(events):
        runs = [r for r in records if r["event"] == event and not r.get("missing")]
        start = 0.0
        for (later, earlier, _), (colour, _) in zip(PHASES[event], kinds):
            span = statistics.median(r["moments_s"][later] - r["moments_s"].get(earlier, 0.0) for r in runs)
            ax.barh(y, span, left=start, color=colour, edgecolor="white", height=0.6)
            if span > 2.5:
                ax.text(start + span / 2, y, f"{span:.0f} s", ha="center", va="center", fontsize=8, color="white")
            start += span
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=text) for colour, text in kinds]
    ax.set_yticks(range(len(events)), ["a node lost" if e == "node-loss" else "preempted (USR1)" for e in events])
    ax.set(xlabel="seconds after the event, until the job trains again (medians)")
    ax.invert_yaxis()
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, frameon=False)
    fig.suptitle(
        f"SLURM 22.05 on 3 nodes in network namespaces; {machine['cpu']}, {machine['cores']} cores, "
        f"torch {machine['torch']}, {machine['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    return to_svg(fig)
