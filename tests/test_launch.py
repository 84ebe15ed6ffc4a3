"""The process helpers: nothing hangs, the first failure is reported with its traceback, a crash at
exit counts as a failure, and nothing is left running."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import time

import pytest
import torch
import torch.distributed as dist

from conftest import CommandRuns
from distdocs.launch import RankFailed, _session_members, run_command, spawn_world

SCRIPTS = "tests/faulty_scripts"


def sum_of_ranks(rank: int, world_size: int) -> float:
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item()


def rank_one_raises(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("boom from rank 1")
    dist.barrier()


def rank_one_hangs(rank: int, world_size: int) -> None:
    if rank == 1:
        time.sleep(3600)


def abort_after_returning(rank: int, world_size: int) -> str:
    atexit.register(os.abort)
    return "returned"


@pytest.mark.parametrize("world_size", [2, 3])
def test_spawn_world_returns_every_rank_result(world_size):
    assert spawn_world(sum_of_ranks, world_size) == [world_size * (world_size + 1) / 2] * world_size


def test_spawn_world_reports_the_failing_rank_traceback_fast():
    start = time.monotonic()
    with pytest.raises(RankFailed, match="rank 1 failed") as info:
        spawn_world(rank_one_raises, 2, timeout_s=60)
    assert "ValueError: boom from rank 1" in str(info.value)
    assert time.monotonic() - start < 30  # not the 60 s timeout
    assert not multiprocessing.active_children()


def test_spawn_world_times_out_and_kills_every_rank():
    start = time.monotonic()
    with pytest.raises(RankFailed, match=r"timed out: ranks \[1\]"):
        spawn_world(rank_one_hangs, 2, timeout_s=8)
    assert time.monotonic() - start < 20
    assert not multiprocessing.active_children()


def test_spawn_world_fails_a_rank_that_aborts_after_returning():
    with pytest.raises(RankFailed, match="exited with code -6 \\(SIGABRT\\)"):
        spawn_world(abort_after_returning, 2)


def test_run_command_kills_the_whole_tree_on_timeout():
    result = run_command("sleep 100 & sleep 100", timeout_s=1)
    assert result.timed_out
    assert result.elapsed_s < 10
    assert not _session_members(result.pid), "the background sleep outlived the timeout"


def test_run_command_reports_processes_left_behind():
    result = run_command("sleep 30 & echo started", timeout_s=10)
    assert result.returncode == 0 and not result.timed_out
    assert any("sleep 30" in p for p in result.leftovers)
    assert not _session_members(result.pid)


def test_torchrun_stops_at_the_failing_rank_and_shows_its_traceback():
    result = CommandRuns().run(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/rank_raises.py")
    assert result.returncode != 0 and not result.timed_out
    assert "ValueError: boom from rank 1" in result.stderr
    assert not result.leftovers
    assert result.elapsed_s < 60  # the runtime's collective timeout, not torch's 30 minutes


def test_a_rank_that_aborts_at_exit_fails_the_run_even_after_success():
    runs = CommandRuns()
    with pytest.raises(pytest.fail.Exception, match="exit code|aborted"):
        runs.run_ok(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/abort_at_exit.py")
    assert "self-check passed" in runs.run(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/abort_at_exit.py").stdout
