"""Gloo ranks for tests and benchmarks, forked so that nothing hangs and nothing is left behind.

`World` keeps `world_size` gloo ranks, joined through a FileStore (no ports), to run functions on;
`spawn_world` runs one function on a fresh World. Both stop at the first rank that fails and raise
with that rank's traceback. A rank that returns but then dies at exit (a SIGABRT from a thread left
running, say) fails the world too.

The ranks are forked from a server process that has imported torch once (multiprocessing's
forkserver, with torch preloaded): a rank then starts in milliseconds, where a spawned one imports
torch anew, a second of CPU each. The server imports nothing else and starts no thread, so each rank
begins as a fresh process would, single-threaded, before it enters its node or joins its group. A
forked rank ends with os._exit, as multiprocessing's forked children do; so it runs its atexit
handlers itself, then fails if gloo threads outlived its destroy_process_group, the cause of an
abort at exit (a group still held by a cache or a reference cycle).
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing as mp
import os
import queue
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from distdocs.processes import KILL_GRACE_S

# What the forkserver imports once for every rank it forks.
PRELOAD = ["torch", "torch.distributed", "torch.distributed.nn"]


def _context():
    """multiprocessing's forkserver, with torch preloaded, started (once per process) with
    OMP_NUM_THREADS=1: otherwise importing torch starts an OpenMP thread, and a process with threads
    should not fork. Each rank runs one compute thread in any case, as under torchrun."""
    from multiprocessing import forkserver

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
            # Stopped and reaped when this process exits, not left to notice its parent has gone: a
            # command that used a World then leaves nothing running, and its CPU counts as its child's.
            atexit.register(forkserver._forkserver._stop)
        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = before
    return ctx


GLOO_THREADS_LEFT = 3  # a rank's exit code when gloo threads outlived its destroy_process_group


def forked_cpu_seconds() -> float:
    """CPU seconds of the forkserver and of the ranks it forked that have ended (it reaps them), so far
    in this process; 0 before the first World. A rank is not this process's child, so getrusage's
    RUSAGE_CHILDREN does not count it."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split() if pid else []
    except OSError:
        return 0.0
    # After the command name: utime, stime, cutime and cstime are fields 12 to 15, in clock ticks.
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class RankFailed(RuntimeError):
    """A rank of a World raised, timed out or died."""


def _rank_loop(rank, world_size, store_path, timeout_s, tasks, results, namespace=None) -> None:
    """One rank of a World: join the group, then run tasks until told to stop."""
    if namespace is not None:  # a node of a distdocs.lab.links.Network: enter it before any thread starts
        from distdocs.lab.links import enter

        enter(namespace)
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"  # the node's link; the host name would resolve to loopback
    import torch
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group

    # One compute thread per rank, as torchrun sets OMP_NUM_THREADS=1: ranks that each spawn a thread
    # per core fight over the cores with each other and with gloo's own threads.
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))
    try:
        while (task := tasks.get()) is not None:
            fn, args = task
            try:
                results.put((rank, True, fn(rank, world_size, *args)))
            except BaseException:
                results.put((rank, False, traceback.format_exc()))
                raise SystemExit(1) from None
    finally:
        _release_dtensor_caches()
        gc.collect()  # DDP and FSDP models, and what the caches held, sit in reference cycles: free them first
        dist.destroy_process_group()
    # A forked rank ends as multiprocessing ends its forked children, with os._exit, which skips
    # Python's shutdown. So it runs what can fail there itself: the atexit handlers; then it looks for
    # the cause of an abort at exit, as docexec's exit probe does in every launched process: gloo
    # threads still running once the group is destroyed. Seen here every time, not now and then.
    atexit._run_exitfuncs()
    if left := _gloo_threads():
        print(f"rank {rank}: {left} gloo threads outlived destroy_process_group", file=sys.stderr, flush=True)
        raise SystemExit(GLOO_THREADS_LEFT)


def _gloo_threads() -> int:
    """How many of this process's threads are gloo's (Linux /proc; elsewhere, such as macOS, where the
    scale model runs with its links paced by the ranks, none can be counted: 0)."""
    names = []
    if not os.path.isdir("/proc/self/task"):
        return 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # a thread that ended while we looked
            pass
    return sum(name.startswith(("pt_gloo", "gloo_")) for name in names)


def _release_dtensor_caches() -> None:
    """torch's DTensor keeps every DeviceMesh it used (and so the mesh's gloo groups) in caches; gloo
    cannot stop the threads of a group still held, and they race the exit, which can abort it. The
    same cure as examples/sharded/step01_fsdp.py's, for functions run on a World."""
    import sys

    if "torch.distributed.tensor" not in sys.modules:  # no DTensor used: nothing cached
        return
    from torch.distributed.tensor import _collective_utils, _redistribute, debug

    for clear in (
        getattr(debug, "_clear_sharding_prop_cache", None),
        getattr(_collective_utils.MeshTopoInfo.build_from_mesh, "cache_clear", None),
        getattr(_redistribute, "clear_redistribute_planner_cache", None),
        getattr(getattr(_redistribute, "_gen_transform_infos", None), "cache_clear", None),
    ):
        if clear is not None:
            clear()


class World:
    """`world_size` gloo ranks, joined through a FileStore in a temporary folder (no ports), kept
    alive between calls so that many small checks pay the start-up once.

        with World(2) as world:
            world.run(fn, x)   # fn(rank, world_size, x) on every rank; one result per rank

    `fn` must be importable by name (defined at module level), as multiprocessing requires.
    A rank that raises, a call that outlives `timeout_s`, or a rank that dies raises RankFailed with
    the first failing rank's traceback, and the world is torn down. Closing the world checks that
    every rank exited with code 0: one that aborts at exit fails too. No rank outlives the world.

    With `namespaces` (one per rank, from a `distdocs.lab.links.Network`), each rank runs inside its
    node, and gloo's traffic between nodes crosses the network's links.
    """

    def __init__(self, world_size: int, timeout_s: float = 60.0, namespaces: list[str] | None = None) -> None:
        self.world_size, self.timeout_s = world_size, timeout_s
        if namespaces is not None and len(namespaces) != world_size:
            raise ValueError(f"namespaces: {len(namespaces)} given, one per rank needed ({world_size})")
        places = namespaces or [None] * world_size
        ctx = _context()
        self._tmp = tempfile.TemporaryDirectory(prefix="distdocs-world-")
        store_path = os.path.join(self._tmp.name, "store")
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(world_size)]
        self._procs = [
            ctx.Process(
                target=_rank_loop,
                daemon=True,
                args=(rank, world_size, store_path, timeout_s, self._tasks[rank], self._results, places[rank]),
            )
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
                if p.exitcode == GLOO_THREADS_LEFT:
                    raise RankFailed(
                        f"rank {rank} finished its work, but gloo threads outlived its destroy_process_group: "
                        "a process group still held (a cache, a reference cycle) makes a process abort at exit"
                    )
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

    def __enter__(self) -> World:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()


def spawn_world(fn: Callable[..., Any], world_size: int, *args: Any, timeout_s: float = 60.0) -> list[Any]:
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
                    raise RankFailed(f"timed out: ranks {pending} had not returned") from None
                continue
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                code = procs[dead[0]].exitcode
                raise RankFailed(f"rank {dead[0]} died with exit code {code} before returning") from None
        if not ok:
            raise RankFailed(f"rank {rank} failed:\n{value}")
        done[rank] = value
    return [done[r] for r in range(world_size)]
