"""Replica groups with torchft beside restart-everything with torchrun, taken in one run, on the
same small model. torchft: two replica groups of one rank (examples/fault_tolerance/step04_torchft.py),
group 1 SIGKILLed with its launcher and started again at once; timed are the survivor's next step,
and the lost group's first step after it copied a live group's weights. torchrun: `bench recovery`'s
run, rank 1 of 2 killed, everything restarted from the checkpoint. Each line of output is timed as it
arrives."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from distdocs.arguments import require
from distdocs.bench import killed_run
from distdocs.bench.harness import machine_line
from distdocs.processes import kill_session

EXAMPLE = "examples/fault_tolerance/step04_torchft.py"
KILL = re.compile(r"\[group 1\] SIGKILL at step (\d+)")
SURVIVOR = re.compile(r"\[group 0\] step (\d+): ([\d.]+) s after the one before")
FIRST = re.compile(r"\[group (\d)\] first step: (\d+)")
# The lost group comes back at once, as on the page, or LATER_S later: then the survivor cannot wait
# for it, and trains alone once the lighthouse has given the dead group up (its heartbeat timeout).
LATER_S = 6.0
ROWS = [  # (kind, key, what the table and the figure call it)
    ("torchrun", "kill_to_resumed_s", "torchrun, all restarted: the job's first step"),
    ("torchft", "kill_to_survivor_s", "torchft, back at once: the survivor's next step"),
    ("torchft", "kill_to_rejoined_s", "torchft, back at once: the lost group's first step"),
    ("torchft-later", "kill_to_survivor_s", f"torchft, back {LATER_S:.0f} s later: the survivor's next step"),
    ("torchft-later", "kill_to_rejoined_s", f"torchft, back {LATER_S:.0f} s later: the lost group's first step"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=3, help="killed runs of each kind; medians (default: 3)")


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(args.repeat >= 1, "--repeat must be at least 1")
    require(Path(EXAMPLE).is_file(), f"{EXAMPLE}: no such file; run this from the repository's root")
    require(shutil.which("torchft_lighthouse", path=os.path.dirname(sys.executable)) is not None, "needs torchft")
    records = []
    for i in range(args.repeat):  # alternately, so that a noisy minute hits both alike
        if progress:
            progress(f"killed runs {i + 1} of {args.repeat}: torchft, then torchrun")
        records.append({"kind": "torchft", **torchft_run(20)})
        records.append({"kind": "torchft-later", **torchft_run(10, LATER_S, step_seconds=0.3)})
        records.append({"kind": "torchrun", **killed_run.timed_run(killed_run.EXAMPLE, 13)})
    return records


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchft_run(kill_at_step: int, later_s: float = 0.0, step_seconds: float = 0.1, timeout_s: float = 300) -> dict:
    """The page's three commands: group 0 (hosting the lighthouse), group 1 killed at `kill_at_step`,
    group 1 again `later_s` after it is gone. Returns when each mark was seen, in seconds after the kill."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    lines: list[tuple[float, str]] = []  # each line of output, with when it arrived
    readers: list[threading.Thread] = []
    fired = tempfile.mkdtemp(prefix="distdocs-fault-")  # the fault fires once: not in the replacement
    start = time.monotonic()

    def launch(group: int, *extra: str) -> subprocess.Popen:
        env = {**os.environ, "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{port}", "REPLICA_GROUP_ID": str(group)}
        # Group 1's loss is injected as the doc tests inject it (docexec/faults): the example kills nothing.
        env |= {
            "DISTDOCS_FAULT_KILL_GROUP": "1",
            "DISTDOCS_FAULT_KILL_AT_STEP": str(kill_at_step),
            "DISTDOCS_FAULT_ONCE": os.path.join(fired, "fault-fired"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(killed_run.FAULTS), os.environ.get("PYTHONPATH")) if p),
        }
        command = [torchrun, "--standalone", "--nproc_per_node=1", EXAMPLE, "--step-seconds", str(step_seconds), *extra]
        # A session of its own, so that its ranks end with it (kill_session)
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )

        def read() -> None:
            for line in proc.stdout:
                lines.append((time.monotonic() - start, line))

        readers.append(threading.Thread(target=read, daemon=True))
        readers[-1].start()
        return proc

    port = free_port()
    procs = [launch(0, "--host-lighthouse"), launch(1)]
    try:
        procs[1].wait(timeout=timeout_s)
        time.sleep(later_s)
        relaunched = time.monotonic() - start
        procs.append(launch(1))
        codes = [procs[0].wait(timeout=timeout_s), procs[2].wait(timeout=timeout_s)]
    finally:
        for proc in procs:
            kill_session(proc.pid)
            proc.wait()
        shutil.rmtree(fired, ignore_errors=True)
    for reader in readers:  # a process's output ends when it does
        reader.join(timeout=10)
    text = "".join(line for _, line in lines)
    kill = next(((t, int(m[1])) for t, ln in lines if (m := KILL.search(ln))), None)
    survivor = next(((t, float(m[2])) for t, ln in lines if (m := SURVIVOR.search(ln))), None)
    firsts = [(t, int(m[1]), int(m[2])) for t, ln in lines if (m := FIRST.search(ln))]
    back = next(((t, step) for t, g, step in firsts if g == 1 and kill and t > kill[0]), None)
    if codes != [0, 0] or text.count("self-check passed") != 1 or not (kill and survivor and back):
        raise RuntimeError(f"the torchft run failed (exit codes {codes}):\n{text[-3000:]}")
    return {
        "kill_at_step": kill[1],
        "later_s": later_s,
        "step_seconds": step_seconds,
        "kill_to_survivor_s": survivor[0] - kill[0],
        "survivor_gap_s": survivor[1],
        "kill_to_relaunch_s": relaunched - kill[0],
        "kill_to_rejoined_s": back[0] - kill[0],
        "rejoined_at_step": back[1],
    }


def medians(records: list[dict]) -> list[tuple[str, float]]:
    return [(what, statistics.median(r[key] for r in records if r["kind"] == kind)) for kind, key, what in ROWS]


def format_table(records: list[dict], machine: dict) -> str:
    runs = sum(r["kind"] == "torchrun" for r in records)
    lines = [
        machine_line(
            machine,
            f"2 replica groups of 1 rank (torchft 0.2.0) and 2 ranks under torchrun, one killed; medians of {runs} "
            "killed runs of each, alternately",
        ),
        f"{'from the kill to':<64} {'seconds':>8}",
    ]
    lines += [f"{what:<64} {seconds:>8.2f}" for what, seconds in medians(records)]
    redone = statistics.median(r["redone_steps"] * r["step_s"] for r in records if r["kind"] == "torchrun")
    lines.append(f"{'torchrun: steps trained again, at the measured pace':<64} {redone:>8.2f}")
    return "\n".join(lines)


def plot(records: list[dict], machine: dict) -> str:
    """One bar per row of the table: seconds from the kill (medians)."""
    from distdocs.figures import pyplot, to_svg

    rows = medians(records)
    fig, ax = pyplot().subplots(figsize=(8.0, 3.2))
    for y, (what, seconds) in enumerate(rows):
        ax.barh(y, seconds, color="C1" if what.startswith("torchrun") else "C0", height=0.6)
        ax.text(seconds, y, f" {seconds:.1f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [what.replace(": ", ":\n", 1) for what, _ in rows], fontsize=8)
    ax.set(xlabel="seconds after the kill (medians)")
    ax.set_xlim(0, max(s for _, s in rows) * 1.2)
    ax.invert_yaxis()
    fig.suptitle(
        f"one rank of 2 killed; {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, "
        f"{machine['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    return to_svg(fig)
