"""One killed run: the fault-tolerant example launched under torchrun, rank 1 SIGKILLed mid-run, and
each line of output timed as it arrives; the phases from the kill to training again are the gaps
between the lines that mark them. `bench recovery` reports it, and `bench torchft` sets it beside
torchft's replica groups."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from distdocs.processes import kill_session

EXAMPLE = "examples/fault_tolerance/step01_resume_after_kill.py"
# The example kills nothing itself: the kill is injected into its ranks as the doc tests inject it, by
# this folder's sitecustomize.py first on PYTHONPATH, driven by DISTDOCS_FAULT_* variables.
FAULTS = Path(__file__).resolve().parents[3] / "docexec" / "faults"
# The lines that mark each moment: the example's own, and torchrun's (LOGLEVEL=INFO).
MARKS = {
    "start": re.compile(r"attempt 0: starting at step 0"),
    "kill": re.compile(r"\[rank \d+\] SIGKILL at step (\d+)"),
    "noticed": re.compile(r"Sending process \d+ closing signal SIGTERM|failed \(exitcode: -9\)"),
    "restarting": re.compile(r"restart_count=1"),
    "resumed": re.compile(r"attempt 1: resumed from step (\d+)"),
}
PHASES = [
    ("noticed", "kill", "torchrun notices the dead rank and stops the others"),
    ("restarting", "noticed", "a new rendezvous for the restarted group"),
    ("resumed", "restarting", "Python and torch start, the group forms, the checkpoint loads"),
]


def timed_run(example: str, kill_at_step: int, timeout_s: float = 300) -> dict:
    """Launch the example with rank 1 killed at `kill_at_step`; return when each mark was seen."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    with tempfile.TemporaryDirectory() as ckpt:
        command = [torchrun, "--standalone", "--nproc_per_node=2", "--max-restarts=1", example, "--ckpt-dir", ckpt]
        fault = {
            "DISTDOCS_FAULT_KILL_RANK": "1",
            "DISTDOCS_FAULT_KILL_AT_STEP": str(kill_at_step),
            "DISTDOCS_FAULT_ONCE": os.path.join(ckpt, ".fault-fired"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(FAULTS), os.environ.get("PYTHONPATH")) if p),
        }
        env = {**os.environ, "LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **fault}
        start = time.monotonic()
        seen: dict[str, float] = {}
        steps: dict[str, int] = {}
        lines = []
        # A session of its own: however the run ends, its ranks end with it (kill_session).
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        try:
            for line in proc.stdout:
                now = time.monotonic() - start
                lines.append(line)
                for name, pattern in MARKS.items():
                    m = pattern.search(line)
                    if m and name not in seen:
                        seen[name] = now
                        if m.groups():
                            steps[name] = int(m.group(1))
                if time.monotonic() - start > timeout_s:
                    raise RuntimeError(f"the killed run took over {timeout_s} s")
            proc.wait(timeout=timeout_s)
        finally:
            kill_session(proc.pid)
            proc.wait()
    missing = [name for name in MARKS if name not in seen]
    if proc.returncode != 0 or missing:
        tail = "".join(lines[-20:])
        raise RuntimeError(f"the killed run failed (exit {proc.returncode}; not seen: {missing}):\n{tail}")
    step_s = (seen["kill"] - seen["start"]) / steps["kill"]  # attempt 0's pace, from its first step to the kill
    record = {"kill_at_step": steps["kill"], "resumed_from": steps["resumed"], "step_s": step_s}
    for later, earlier, _ in PHASES:
        record[f"{earlier}_to_{later}_s"] = seen[later] - seen[earlier]
    record["kill_to_resumed_s"] = seen["resumed"] - seen["kill"]
    record["redone_steps"] = steps["kill"] - steps["resumed"]
    return record
