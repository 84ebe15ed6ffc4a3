"""Start processes so that nothing hangs and nothing is left behind.

- `run_command` runs a shell command (a `torchrun ...` line, say) in its own process session, with a
  hard timeout, and kills whatever the command left running.
- `World` keeps `world_size` gloo ranks, joined through a FileStore (no ports), to run functions on;
  `spawn_world` runs one function on a fresh World. Both stop at the first rank that fails and raise
  with that rank's traceback. A rank that returns but then dies at exit (a SIGABRT from a thread left
  running, say) fails the world too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

KILL_GRACE_S = 3.0
# Helpers that end on their own once their parent has gone (multiprocessing's resource tracker, say)
# get this long before they count as left behind.
LINGER_S = 2.0


class RankFailed(RuntimeError):
    """A rank of a spawned world raised, timed out or died."""


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

    def describe(self, tail: int = 3000) -> str:
        """A failure report: what ran, how it ended, and the end of each stream."""
        status = "timed out" if self.timed_out else f"exit code {self.returncode}"
        parts = [f"$ {self.command}\n{status} after {self.elapsed_s:.1f} s"]
        if self.leftovers:
            parts.append("left running (killed): " + "; ".join(self.leftovers))
        parts.append("--- stdout (end) ---\n" + self.stdout[-tail:])
        parts.append("--- stderr (end) ---\n" + self.stderr[-tail:])
        return "\n".join(parts)


def _session_members(sid: int) -> list[tuple[int, str]]:
    """The live processes in session `sid` (Linux /proc), as (pid, command line)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the parenthesised command name: state ppid pgrp session ...
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[3]) == sid:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                members.append((int(entry.name), cmdline))
        except (OSError, IndexError, ValueError):
            continue
    return members


def _kill_session(sid: int) -> list[str]:
    """SIGTERM, then SIGKILL, every process of session `sid`; return what was found alive."""
    found = _session_members(sid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in _session_members(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while _session_members(sid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return [f"{pid} {cmd}" for pid, cmd in found]


def run_command(
    command: str, *, timeout_s: float, cwd: str | Path | None = None, env: dict | None = None
) -> CommandResult:
    """Run `command` with bash in a new session; kill the whole session on timeout or when done.

    Output goes to temporary files rather than pipes, so that a background process that inherited
    them cannot keep us waiting after the command itself has exited."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env=env, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc.pid)
            proc.wait()
        deadline = time.monotonic() + LINGER_S
        while _session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        leftovers = _kill_session(proc.pid)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return CommandResult(
        command, proc.returncode, stdout, stderr, time.monotonic() - start, proc.pid, timed_out, leftovers
    )


def _rank_loop(rank, world_size, store_path, timeout_s, tasks, results) -> None:
    """One rank of a World: join the group, then run tasks until told to stop."""
    import torch
    import torch.distributed as dist

    from distdocs.runtime import release_ddp_reducers

    # One compute thread per rank, as torchrun sets OMP_NUM_THREADS=1: ranks that each spawn a thread
    # per core fight over the cores with each other and with gloo's own threads.
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )
    try:
        while (task := tasks.get()) is not None:
            fn, args = task
            try:
                results.put((rank, True, fn(rank, world_size, *args)))
            except BaseException:
                results.put((rank, False, traceback.format_exc()))
                raise SystemExit(1)
    finally:
        release_ddp_reducers()
        dist.destroy_process_group()


class World:
    """`world_size` gloo ranks, joined through a FileStore in a temporary folder (no ports), kept
    alive between calls so that many small checks pay the start-up once.

        with World(2) as world:
            world.run(fn, x)   # fn(rank, world_size, x) on every rank; one result per rank

    `fn` must be importable by name (defined at module level), as multiprocessing's spawn requires.
    A rank that raises, a call that outlives `timeout_s`, or a rank that dies raises RankFailed with
    the first failing rank's traceback, and the world is torn down. Closing the world checks that
    every rank exited with code 0: one that aborts at exit fails too. No rank outlives the world.
    """

    def __init__(self, world_size: int, timeout_s: float = 60.0) -> None:
        self.world_size, self.timeout_s = world_size, timeout_s
        ctx = mp.get_context("spawn")
        self._tmp = tempfile.TemporaryDirectory(prefix="distdocs-world-")
        store_path = os.path.join(self._tmp.name, "store")
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(world_size)]
        self._procs = [
            ctx.Process(target=_rank_loop, daemon=True,
                        args=(rank, world_size, store_path, timeout_s, self._tasks[rank], self._results))
            for rank in range(world_size)
        ]
        for p in self._procs:
            p.start()

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        for tasks in self._tasks:
            tasks.put((fn, args))
        try:
            return _collect(self._procs, self._results, self.world_size, time.monotonic() + self.timeout_s)
        except BaseException:
            self.kill()
            raise

    def close(self) -> None:
        """Stop every rank and check that each exited cleanly."""
        for tasks in self._tasks:
            tasks.put(None)
        deadline = time.monotonic() + self.timeout_s
        try:
            for rank, p in enumerate(self._procs):
                p.join(max(0.0, deadline - time.monotonic()))
                if p.exitcode is None:
                    raise RankFailed(f"rank {rank} did not exit within {self.timeout_s} s")
                if p.exitcode != 0:
                    name = f" ({signal.Signals(-p.exitcode).name})" if p.exitcode < 0 else ""
                    raise RankFailed(f"rank {rank} finished its work, then exited with code {p.exitcode}{name}")
        finally:
            self.kill()

    def kill(self) -> None:
        for p in self._procs:
            if p.is_alive():
                p.kill()
            p.join(KILL_GRACE_S)
        self._tmp.cleanup()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()


def spawn_world(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 60.0
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` once on a fresh World of `world_size` ranks; return each
    rank's result. Raises RankFailed as World does, including for a rank that aborts at exit."""
    with World(world_size, timeout_s) as world:
        return world.run(fn, *args)


def _collect(procs, results, world_size: int, deadline: float) -> list[Any]:
    done: dict[int, Any] = {}
    while len(done) < world_size:
        try:
            rank, ok, value = results.get(timeout=0.05)
        except queue.Empty:
            # A rank that died without reporting (killed, segfault, abort) fails the world now, not
            # at the timeout. Its last words may still be in the pipe, so listen once more first.
            dead = [r for r, p in enumerate(procs) if r not in done and p.exitcode is not None]
            if not dead:
                if time.monotonic() > deadline:
                    pending = [r for r in range(world_size) if r not in done]
                    raise RankFailed(f"timed out: ranks {pending} had not returned")
                continue
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                code = procs[dead[0]].exitcode
                raise RankFailed(f"rank {dead[0]} died with exit code {code} before returning")
        if not ok:
            raise RankFailed(f"rank {rank} failed:\n{value}")
        done[rank] = value
    return [done[r] for r in range(world_size)]
