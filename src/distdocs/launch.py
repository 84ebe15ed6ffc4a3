"""Start processes so that nothing hangs and nothing is left behind.

- `run_command` runs a shell command (a `torchrun ...` line, say) in its own process session, with a
  hard timeout, and kills whatever the command left running.
- `spawn_world` runs a function on `world_size` gloo ranks joined through a FileStore (no ports), stops
  at the first rank that fails, and raises with that rank's traceback. A rank that returns but then
  dies at exit (a SIGABRT from a thread left running, say) fails the world too.
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
        leftovers = _kill_session(proc.pid)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return CommandResult(
        command, proc.returncode, stdout, stderr, time.monotonic() - start, proc.pid, timed_out, leftovers
    )


def _rank_main(fn, rank, world_size, store_path, timeout_s, args, results) -> None:
    import torch.distributed as dist

    from distdocs.runtime import release_ddp_reducers

    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )
    try:
        results.put((rank, True, fn(rank, world_size, *args)))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
        raise SystemExit(1)
    finally:
        release_ddp_reducers()
        dist.destroy_process_group()


def spawn_world(
    fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 60.0
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` gloo ranks; return each rank's result.

    `fn` must be importable by name (defined at module level), as multiprocessing's spawn requires.
    Raises RankFailed with the first failing rank's traceback, when `timeout_s` passes, or when a
    rank exits non-zero after returning. No rank outlives this call.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="distdocs-world-") as tmp:
        store_path = os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(fn, rank, world_size, store_path, timeout_s, args, results),
                daemon=True,
            )
            for rank in range(world_size)
        ]
        for p in procs:
            p.start()
        try:
            return _collect(procs, results, world_size, time.monotonic() + timeout_s)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(KILL_GRACE_S)
            results.close()


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
    for rank, p in enumerate(procs):
        p.join(max(0.0, deadline - time.monotonic()))
        if p.exitcode is None:
            raise RankFailed(f"rank {rank} returned but did not exit before the timeout")
        if p.exitcode != 0:
            name = f" ({signal.Signals(-p.exitcode).name})" if p.exitcode < 0 else ""
            raise RankFailed(f"rank {rank} returned, then exited with code {p.exitcode}{name}")
    return [done[r] for r in range(world_size)]
