"""Gloo ranks for tests and benchmarks, spawned so that nothing hangs and nothing is left behind.

`World` keeps `world_size` gloo ranks, joined through a FileStore (no ports), to run functions on;
`spawn_world` runs one function on a fresh World. Both stop at the first rank that fails and raise
with that rank's traceback. A rank that returns but then dies at exit (a SIGABRT from a thread left
running, say) fails the world too.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

KILL_GRACE_S = 3.0


class RankFailed(RuntimeError):
    """A rank of a spawned world raised, timed out or died."""


def _rank_loop(rank, world_size, store_path, timeout_s, tasks, results, namespace=None) -> None:
    """One rank of a World: join the group, then run tasks until told to stop."""
    if namespace is not None:  # a node of a distdocs.links.Network: enter it before any thread starts
        from distdocs.links import enter

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
        gc.collect()  # DDP models sit in reference cycles: free them while the group still exists
        _release_dtensor_caches()
        dist.destroy_process_group()


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

    `fn` must be importable by name (defined at module level), as multiprocessing's spawn requires.
    A rank that raises, a call that outlives `timeout_s`, or a rank that dies raises RankFailed with
    the first failing rank's traceback, and the world is torn down. Closing the world checks that
    every rank exited with code 0: one that aborts at exit fails too. No rank outlives the world.

    With `namespaces` (one per rank, from a `distdocs.links.Network`), each rank runs inside its
    node, and gloo's traffic between nodes crosses the network's links.
    """

    def __init__(self, world_size: int, timeout_s: float = 60.0, namespaces: list[str] | None = None) -> None:
        self.world_size, self.timeout_s = world_size, timeout_s
        if namespaces is not None and len(namespaces) != world_size:
            raise ValueError(f"namespaces: {len(namespaces)} given, one per rank needed ({world_size})")
        places = namespaces or [None] * world_size
        ctx = mp.get_context("spawn")
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
