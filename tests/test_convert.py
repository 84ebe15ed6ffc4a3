"""The convert page: the one-process script and its distributed version train to the same result, and
the diff on the page is made from the two files."""

from __future__ import annotations

import os
import re
import runpy
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from docexec.commands import Background, command_env
from docexec.fences import DOCS, REPO
from support.launches import (
    CONVERT_DDP,
    CONVERT_ONE_PROCESS,
    SEEDS,
    TOKEN_STREAM_DDP,
    TOKEN_STREAM_DDP_FLOAT64,
    TOKEN_STREAM_ONE_PROCESS,
    TWO_FORWARDS,
)

LAST_EPOCH = re.compile(r"epoch 3: validation loss ([\d.]+), accuracy ([\d.]+)%")


@pytest.mark.processes
def test_the_distributed_script_trains_to_what_the_one_process_script_reaches(command_runs):
    """Two runs of one recipe, not one computation: the shuffles differ, and on the CPU each rank's
    BatchNorm sees half the batch. So the final accuracy must agree within 2 points and the
    validation loss within 25%."""
    one = LAST_EPOCH.search(command_runs.run_ok(CONVERT_ONE_PROCESS).stdout).groups()
    two = LAST_EPOCH.search(command_runs.run_ok(CONVERT_DDP).stdout).groups()
    (loss_one, acc_one), (loss_two, acc_two) = map(float, one), map(float, two)
    assert abs(acc_one - acc_two) <= 2.0, (acc_one, acc_two)
    assert abs(loss_one - loss_two) <= 0.25 * loss_one, (loss_one, loss_two)


@pytest.mark.fast
def test_the_page_shows_the_diff_of_the_two_files():
    sys.path.insert(0, str(REPO / "hooks"))
    import file_diff

    page = (DOCS / "multi-gpu/convert-your-script.md").read_text()
    rendered = file_diff.on_page_markdown(page, None, None, None)
    diff = file_diff.render("convert/step01_one_process.py", "convert/step02_ddp.py")
    assert "<!-- diff:" not in rendered and "```diff" in rendered and diff in rendered
    assert "+    model = DDP(model.to(device))" in diff.splitlines()  # the change the page is about
    assert "--8<--" not in diff  # snippet markers are the site's, not the reader's code


# The second conversion: a language model on a token stream, with no DataLoader (step04 -> step05).
LM_SCRIPT = REPO / "examples/convert/step05_token_stream_ddp.py"
EPOCH_LINE = re.compile(r"epoch (\d+): lr ([\d.e-]+), validation loss ([\d.]+)")


@pytest.mark.processes
def test_the_token_stream_conversion_makes_the_one_process_scripts_decisions(command_runs):
    """step05 on 2 ranks against step04 itself, the reader's script: the same learning rates, the
    same early stop, and validation losses within the 2e-3 that float32 rounding grows to at this
    learning rate (the example's self-check compares with its own one-process run, and float64)."""
    one, two = command_runs.run_ok(TOKEN_STREAM_ONE_PROCESS).stdout, command_runs.run_ok(TOKEN_STREAM_DDP).stdout
    epochs_one, epochs_two = EPOCH_LINE.findall(one), EPOCH_LINE.findall(two)
    assert [e[:2] for e in epochs_one] == [e[:2] for e in epochs_two], (one, two)
    assert max(abs(float(a[2]) - float(b[2])) for a, b in zip(epochs_one, epochs_two)) < 5e-3, (one, two)
    assert "2 epochs without a better validation loss: stopping" in one and two  # the early stop happens
    assert len({lr for _, lr, _ in epochs_two}) >= 3, two  # and the plateau annealed more than once
    test_loss = re.compile(r"best model: validation loss [\d.]+, test loss ([\d.]+)")
    assert abs(float(test_loss.search(one).group(1)) - float(test_loss.search(two).group(1))) <= 1e-3


@pytest.mark.processes
def test_in_float64_the_ranks_end_with_one_process_s_weights(command_runs):
    """The page's claim: rounding, not the conversion, parts the float32 weights."""
    out = command_runs.run_ok(TOKEN_STREAM_DDP_FLOAT64).stdout
    weights = re.search(r"max \|ranks - one process\|: validation loss (\S+), weights (\S+)", out)
    assert weights and float(weights.group(2)) < 1e-9 and float(weights.group(1)) < 1e-9, out  # the page says 1e-9


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/convert-your-script.md",
    "Ctrl-C in a terminal reaches torchrun alone, which passes it on as SIGINT.",
)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_to_torchrun_saves_a_checkpoint_at_a_step_and_torchrun_exits_1(tmp_path: Path, sig):
    """What the page says a reader sees after `kill -TERM` or Ctrl-C (SIGINT to torchrun alone: its
    workers run in sessions of their own): torchrun passes the signal on, both ranks stop at the same
    step, rank 0 saves once, the ranks exit well inside torchrun's 30 s grace, and torchrun, which
    re-raises the signal as an exception, exits 1."""
    shutil.copy(LM_SCRIPT, tmp_path)
    command = ["torchrun", "--standalone", "--nproc_per_node=2", LM_SCRIPT.name]  # no shell: the pid is torchrun's
    with Background(command, tmp_path / "out.txt", cwd=tmp_path, env=command_env(gpu=False)) as run:
        deadline = time.monotonic() + 60
        # Rank 0 prints "epoch 0:" after an evaluation whose all_reduce both ranks joined, so both have
        # installed their handlers; its first line, printed before rank 1 had, once let SIGINT kill rank 1.
        while "epoch 0:" not in run.output() and run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "epoch 0:" in run.output() and run.proc.poll() is None, run.output()
        signalled = time.monotonic()
        os.kill(run.pid, sig)
        returncode = run.wait(timeout_s=60)
        took = time.monotonic() - signalled
        text = run.output()
    assert not run.leftovers, f"left running: {run.leftovers}"
    assert returncode == 1 and f"got signal: {int(sig)}" in text, text
    stopped = re.findall(r"stopped at epoch (\d+), step (\d+): saved stopped.pt", text)
    assert len(stopped) == 1 and "self-check passed" not in text and "Traceback" not in text.split("stopped at")[0]
    assert took < 25, f"the ranks took {took:.1f} s to stop: near torchrun's 30 s before SIGKILL"
    checkpoint = torch.load(tmp_path / "stopped.pt", weights_only=True)
    assert (checkpoint["epoch"], checkpoint["step"]) == tuple(map(int, stopped[0])), checkpoint.keys()


@pytest.mark.fast
@pytest.mark.parametrize("name", ["step04_token_stream_one_process.py", "step05_token_stream_ddp.py"])
def test_importing_the_script_as_a_worker_does_runs_nothing(name, capsys):
    """DataLoader workers started with forkserver or spawn import the main module as `__mp_main__`:
    behind `if __name__ == "__main__"`, the training does not run again in each of them."""
    runpy.run_path(str(REPO / "examples/convert" / name), run_name="__mp_main__")
    assert capsys.readouterr() == ("", "") and not dist.is_initialized()


@pytest.mark.fast
def test_columns_that_do_not_divide_stop_every_rank_with_one_line(monkeypatch, capsys):
    """3 ranks and 20 columns: rank 0 says why in one line and exits 2, instead of each rank taking
    20 // 3 columns and 2 going untrained. (The page's 3-rank command checks it under torchrun.)"""
    script = runpy.run_path(str(LM_SCRIPT), run_name="step05")
    monkeypatch.setattr(sys, "argv", ["step05_token_stream_ddp.py"])
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as stopped:
        script["parse_args"]()
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "error: 20 training and 10 validation columns do not split evenly over 3 processes; "
        "launch 1, 2, 5 or 10: torchrun --standalone --nproc_per_node=2 step05_token_stream_ddp.py\n"
    )


# step05 with one fault, injected from here: each rank decides from its own columns' validation loss.
LOCAL_METRIC = """
import importlib.util, sys
import torch.distributed as dist
sys.argv = ["step05_token_stream_ddp.py"]
spec = importlib.util.spec_from_file_location("step05", "step05_token_stream_ddp.py")
step05 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step05)
step05.TIMEOUT_S = 10  # the wait this fault causes, shortened for the test
reduced_evaluate = step05.evaluate

def local_evaluate(*args):
    all_reduce, dist.all_reduce = dist.all_reduce, lambda *a, **k: None  # the evaluation's sum, skipped
    try:
        return reduced_evaluate(*args)
    finally:
        dist.all_reduce = all_reduce

step05.evaluate = local_evaluate
step05.main()
"""


@pytest.mark.processes
@pytest.mark.holds(
    "docs/multi-gpu/convert-your-script.md",
    "Made to decide that way, step05's ranks stopped at different epochs, and rank 0 waited in the barrier "
    "until the timeout.",
)
def test_decisions_from_each_rank_s_own_loss_part_the_ranks(tmp_path: Path):
    """The page's claim for the unreduced metric: the ranks' own validation losses anneal and stop at
    different epochs, so rank 0 waits for rank 1 in the barrier before reading the best model, rank 1
    in its next step's all_reduce, until the group's timeout."""
    shutil.copy(LM_SCRIPT, tmp_path)
    (tmp_path / "local_metric.py").write_text(LOCAL_METRIC)
    command = ["torchrun", "--standalone", "--nproc_per_node=2", "local_metric.py"]
    with Background(command, tmp_path / "out.txt", cwd=tmp_path, env=command_env(gpu=False)) as run:
        returncode = run.wait(timeout_s=150)
        text = run.output()
    assert not run.leftovers, f"left running: {run.leftovers}"
    assert returncode == 1 and "Timed out waiting 10000ms" in text and "self-check passed" not in text, text
    assert "dist.barrier(group)" in text, text  # where rank 0 waited: the ranks stopped at different epochs


CONVERT = "docs/multi-gpu/convert-your-script.md"


@pytest.mark.processes
@pytest.mark.holds(
    CONVERT,
    "DDP sends rank 0's buffers to every rank at the start of each forward, by default, so that every rank "
    "evaluates and saves the same statistics.",
)
@pytest.mark.holds(
    "docs/start/overview.md",
    "At every forward it does send rank 0's buffers (BatchNorm's running statistics), by default, but not the weights.",
)
@pytest.mark.holds(
    CONVERT,
    "torch 2.13 syncs them without changing their version counters (`_sync_buffers` in "
    "`torch/nn/parallel/distributed.py`), so two forwards train, as above.",
)
@pytest.mark.holds(
    CONVERT, "Anomaly detection, around the forward and the backward, names the forward call that made the operation"
)
def test_ddp_syncs_buffers_each_forward_and_two_forwards_train(command_runs):
    """The page's run: as each forward starts, every rank holds rank 0's running statistics, and not
    with forward_sync_buffers=False; two forwards and one backward give one process's gradient; an
    in-place ReLU after tanh raises the version error, and anomaly detection names tanh. And the
    source the page cites: DDP's buffer sync preserves the version counters."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    out = command_runs.run_ok(TWO_FORWARDS).stdout
    assert "as each forward starts: True by default, False without the sync" in out, out
    assert "two forwards, one backward: max |DDP gradient - one process| = 0e+00" in out, out
    assert "modified by an inplace operation" in out and "which is output 0 of Tanh" in out, out
    assert "Error detected in TanhBackward0, made in forward by: return torch.tanh(input)" in out, out
    assert "_unsafe_preserve_version_counter" in inspect.getsource(DistributedDataParallel._sync_buffers)


@pytest.mark.processes
@pytest.mark.holds(
    CONVERT,
    "DataLoader workers seed themselves from one draw of the global random generator, plus their worker id; "
    "so with the same seed everywhere, each rank's workers draw the same augmentations",
)
@pytest.mark.holds(CONVERT, "Give the loader a generator seeded per rank:")
def test_workers_draw_the_same_augmentations_on_every_rank_unless_seeded_per_rank(command_runs):
    out = command_runs.run_ok(SEEDS).stdout
    alike, per_rank = out.splitlines()[:2]
    assert alike.startswith("every rank seeded alike") and "the same augmentation on every rank: True" in alike, out
    assert "the same augmentation on every rank: False" in per_rank, out
    assert all(
        "ranks' samples differ: True" in line and "workers draw alike: False" in line for line in (alike, per_rank)
    )
