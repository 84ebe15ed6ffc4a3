"""distdocs.runtime: backend choice, rank-0 logging, seeding, clean exit, and a one-line error for a
wrong launch."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from conftest import CommandRuns
from distdocs import runtime
from distdocs.launch import spawn_world

EXAMPLE = "examples/data_parallel/step01_manual_allreduce.py"


def test_cpu_gets_gloo_and_gpu_gets_nccl_on_its_local_rank(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.choose_backend_and_device(1) == ("gloo", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.choose_backend_and_device(1) == ("nccl", torch.device("cuda", 1))


def test_print0_prints_on_rank_0_only(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    runtime.print0("from rank 1")
    monkeypatch.setenv("RANK", "0")
    runtime.print0("from rank 0")
    assert capsys.readouterr().out == "from rank 0\n"


def test_seed_everything_makes_weights_reproducible():
    runtime.seed_everything(3)
    a = torch.nn.Linear(4, 4).weight.detach().clone()
    runtime.seed_everything(3)
    assert torch.equal(a, torch.nn.Linear(4, 4).weight)


def ddp_released(rank: int, world_size: int) -> bool:
    model = DDP(torch.nn.Linear(8, 8))
    model(torch.randn(2, 8)).sum().backward()
    runtime.release_ddp_reducers()  # the model is still referenced here, as in an example's `with`
    return not hasattr(model, "reducer") and dist.is_initialized()


def test_ddp_reducers_are_freed_before_the_group_is_destroyed():
    # spawn_world also fails if a rank aborts at exit, so this checks the clean exit too.
    assert spawn_world(ddp_released, 2) == [True, True]


def test_plain_python_gets_a_one_line_error_with_the_torchrun_command():
    result = CommandRuns().run(f"python {EXAMPLE}")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {EXAMPLE} is a distributed example; launch it with torchrun: "
        f"torchrun --standalone --nproc_per_node=2 {EXAMPLE}"
    )


def test_wrong_world_size_gets_one_line_naming_the_right_command():
    script = "examples/model_parallel/step01_split_layers.py"  # needs exactly 2 ranks
    result = CommandRuns().run(f"torchrun --standalone --nproc_per_node=3 {script}")
    assert result.returncode != 0 and not result.timed_out and not result.leftovers
    wanted = (f"error: {script} needs exactly 2 processes, got 3; "
              f"launch it with: torchrun --standalone --nproc_per_node=2 {script}")
    assert wanted in result.stderr.splitlines()
    assert result.stderr.count(wanted) == 1  # said once, by rank 0, not by every rank
    assert "exitcode  : 2" in result.stderr  # torchrun reports the rank's usage exit code
    # torchrun adds its own report and traceback when a worker fails; the script adds none.
    assert f'{script}", line' not in result.stderr
