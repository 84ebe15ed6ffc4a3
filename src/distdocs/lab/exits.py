"""One torchrun launch of an example, and how it ended: the exit soak's launcher (`distdocs bench
exits` launches the examples again and again through it and counts the outcomes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from distdocs.processes import ABORT_MARKERS, kill_session, wait_for_session_to_end

TIMEOUT_S = 300
# A launch's helpers (multiprocessing's resource tracker, say) end soon after torchrun; this long,
# and they count as left running.
LINGER_S = 2.0


def launch(example: str, ranks: int, flags: str = "") -> tuple[str, float, str]:
    """One `torchrun --standalone` launch in its own session; ('ok' | 'abort' | 'failed' | 'timeout'
    | 'left running', seconds, the line of stderr that says what went wrong)."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    command = [torchrun, "--standalone", f"--nproc_per_node={ranks}", example, *flags.split()]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    start = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        _, stderr = proc.communicate()
        return "timeout", time.monotonic() - start, stderr[-300:]
    seconds = time.monotonic() - start
    left = not wait_for_session_to_end(proc.pid, LINGER_S)
    if left:
        kill_session(proc.pid)
    if any(m in stderr for m in ABORT_MARKERS):
        return "abort", seconds, _excerpt(stderr)
    if proc.returncode != 0:
        return "failed", seconds, _excerpt(stderr)
    return ("left running" if left else "ok"), seconds, ""


def _excerpt(stderr: str) -> str:
    """The line that says what went wrong, else the last one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    marked = [line for line in lines if any(m in line for m in ABORT_MARKERS) or "Error" in line]
    return (marked or lines or [""])[0][-300:]
