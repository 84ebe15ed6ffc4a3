"""Run one shell command as a reader would (a `torchrun ...` line, say): in its own process session,
with a hard timeout, every Python process in it carrying the exit probe, and whatever it left running
killed. `run_command` runs it to the end; `Background` starts one that a test watches while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from distdocs.processes import kill_session, wait_for_session_to_end

from docexec.fences import REPO

COMMAND_TIMEOUT_S = 180
# Loaded into every Python process a command starts (PYTHONPATH): it reports a process group that
# outlived destroy_process_group, the cause of aborts at exit (docexec.rule).
EXIT_PROBE = Path(__file__).resolve().parent / "exit_probe"
# Helpers that end on their own once their parent has gone (multiprocessing's resource tracker, say)
# get this long before they count as left behind.
LINGER_S = 2.0


@dataclass
class CommandResult:
    command: str
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    pid: int  # also the session id of everything the command started
    timed_out: bool = False
    leftovers: list[str] = field(default_factory=list)  # processes still alive after it ended
    # What each `distdocs bench` it ran measured, as that command's --json prints it ({benchmark,
    # machine, records}): a page's benchmark command, shown as a table, checked as data.
    records: list[dict] = field(default_factory=list)
    # Files that were in the run's folder before it started (READERS_FILES, the copied examples) and
    # that it changed or removed: a run of a copied-out example must leave this empty.
    disturbed: list[str] = field(default_factory=list)

    def describe(self, tail: int = 3000) -> str:
        """A failure report: what ran, how it ended, and the end of each stream."""
        status = "timed out" if self.timed_out else f"exit code {self.returncode}"
        parts = [f"$ {self.command}\n{status} after {self.elapsed_s:.1f} s"]
        if self.leftovers:
            parts.append("left running (killed): " + "; ".join(self.leftovers))
        parts.append("--- stdout (end) ---\n" + self.stdout[-tail:])
        parts.append("--- stderr (end) ---\n" + self.stderr[-tail:])
        return "\n".join(parts)


def run_command(
    command: str, *, timeout_s: float, cwd: str | Path | None = None, env: dict | None = None
) -> CommandResult:
    """Run `command` with bash in a new session; kill the whole session on timeout or when done.

    Output goes to temporary files rather than pipes, so that a background process that inherited
    them cannot keep us waiting after the command itself has exited."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_session(proc.pid)
            proc.wait()
        wait_for_session_to_end(proc.pid, LINGER_S)
        leftovers = kill_session(proc.pid)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return CommandResult(
        command, proc.returncode, stdout, stderr, time.monotonic() - start, proc.pid, timed_out, leftovers
    )


class Background:
    """A command that a test watches while it runs: started in its own session, stdout and stderr
    going to `log`. Leaving the `with` block (or `stop()`) kills whatever it started; `leftovers`
    then says what was still alive. `command` is a shell line, or a list of arguments run as is."""

    def __init__(self, command: str | list[str], log: Path, *, cwd: str | Path = REPO, env: dict | None = None):
        args = ["bash", "-c", command] if isinstance(command, str) else command
        self.log = log
        self.leftovers: list[str] = []
        with log.open("w") as sink:
            self.proc = subprocess.Popen(
                args,
                cwd=cwd,
                env=env if env is not None else command_env(gpu=False),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout_s: float) -> int:
        """Its exit code; subprocess.TimeoutExpired if it runs past `timeout_s`."""
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> list[str]:
        self.leftovers = kill_session(self.proc.pid)
        self.proc.wait()
        return self.leftovers

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def command_env(gpu: bool, python_bin: Path | None = None) -> dict[str, str]:
    """The reader's environment, with this venv's torchrun, python and distdocs first on PATH (or
    those of `python_bin`, another venv's bin/). CPU commands run with the GPUs hidden, so that they
    test the gloo path on a GPU machine too."""
    env = dict(os.environ)
    env["PATH"] = str(python_bin or Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(EXIT_PROBE)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env
