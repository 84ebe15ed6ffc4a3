"""docs/operations/checkpoint-and-resume.md. examples/fault_tolerance/step01_resume_after_kill.py keeps
its contract: whichever rank dies at whichever step, and even halfway through writing a checkpoint, the
restarted run ends with the same weights as an uninterrupted one, bit for bit. step06 shows the steps
a failure costs with and without checkpoints; torchrun restarts on the store of the attempt before
unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, the reason every restart command on the pages sets it.

The examples carry no fault: each kill here is injected into the ranks from the test side
(docexec/faults/sitecustomize.py, `fault=` of CommandRuns), into the examples' own commands.

`make test` checks two kill points drawn at random on every run, from a seed that the run's header
prints: DISTDOCS_KILL_SEED=<seed> runs the same points again. `make soak` sets DISTDOCS_SOAK=20 and
checks twenty."""

from __future__ import annotations

import ast
import contextlib
import os
import queue
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from distdocs.processes import kill_session, pids, process_stat

from docexec.commands import command_env
from docexec.fault_injection import fault_env
from docexec.fences import REPO
from support.launches import NO_CHECKPOINT, NO_CHECKPOINT_EVERY_10, RESUME_AFTER_KILL
from support.runs import check_refusal

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "examples/fault_tolerance/step01_resume_after_kill.py"
STEPS = 32  # 2 epochs of 512 samples, 16 per rank and step, on 2 ranks
POINTS = [(r, k) for r in (0, 1) for k in range(1, STEPS)]
# tests/plugins/kill_seed.py sets the seed once per run, before pytest-xdist starts its workers, so that all draw alike.
DRAWN = random.Random(int(os.environ.get("DISTDOCS_KILL_SEED", "0"))).sample(
    POINTS, int(os.environ.get("DISTDOCS_SOAK", "2"))
)


def weights_hash(result) -> str:
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("weights_sha256="), result.describe()
    return last


@pytest.fixture(scope="module")
def uninterrupted(command_runs) -> str:
    """The weights of the example's docstring launch, run with no fault: the run that test_examples.py,
    test_multi_node.py and test_slurm.py read too (tests/support/launches.py)."""
    return weights_hash(command_runs.run_ok(RESUME_AFTER_KILL))


@pytest.mark.parametrize(("rank", "step"), DRAWN, ids=[f"kill_point-rank{r}-step{k}" for r, k in DRAWN])
def test_a_rank_killed_at_any_step_resumes_to_the_same_weights(command_runs, uninterrupted, rank, step):
    result = command_runs.run_ok(RESUME_AFTER_KILL, fault=f"kill-rank={rank} kill-at-step={step}")
    assert f"failed (exitcode: -9) local_rank: {rank}" in result.stderr, result.describe()  # it really died
    resumed = step // 4 * 4  # the newest checkpoint at or before the kill, one every 4 steps
    assert f"attempt 1: {'resumed from step ' + str(resumed) if resumed else 'starting at step 0'}" in result.stdout
    assert weights_hash(result) == uninterrupted


# A kill whose newest checkpoint is mid-epoch (16 steps an epoch), with DataLoader worker processes.
MID_EPOCH = [(r, k) for r, k in POINTS if k >= 4 and k // 4 * 4 % 16]
WITH_WORKERS = random.Random(int(os.environ.get("DISTDOCS_KILL_SEED", "0")) + 1).choice(MID_EPOCH)


def test_a_kill_mid_epoch_with_loader_workers_resumes_to_the_same_weights(command_runs, uninterrupted):
    rank, step = WITH_WORKERS
    result = command_runs.run_ok(f"{RESUME_AFTER_KILL} --workers 2", fault=f"kill-rank={rank} kill-at-step={step}")
    assert f"failed (exitcode: -9) local_rank: {rank}" in result.stderr, result.describe()
    assert f"attempt 1: resumed from step {step // 4 * 4}" in result.stdout, result.describe()
    # The same hash as the run without workers: they change when batches are read, never which.
    assert weights_hash(result) == uninterrupted, f"rank {rank} killed at step {step}"


def test_a_kill_halfway_through_a_checkpoint_write_falls_back_to_the_one_before(command_runs, uninterrupted):
    result = command_runs.run_ok(RESUME_AFTER_KILL, fault="kill-in-write=3")  # the third: step 12's
    assert "failed (exitcode: -9) local_rank: 0" in result.stderr, result.describe()
    assert "[rank 0] SIGKILL halfway through writing step-00000012.pt" in result.stdout, result.describe()
    assert "attempt 1: resumed from step 8" in result.stdout, result.describe()
    assert weights_hash(result) == uninterrupted


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--ckpt-every 0", "error: --ckpt-every must be at least 1"),
        ("--workers 9", "error: --workers must be in 0..8"),
    ],
)
def test_settings_out_of_range_get_one_line_and_exit_2(flags, message):
    check_refusal(f"torchrun --standalone --nproc_per_node=2 {SCRIPT} {flags}", message)


def test_an_unwritable_checkpoint_folder_fails_before_training(command_runs, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = command_runs.run(f"torchrun --standalone --nproc_per_node=2 {SCRIPT} --ckpt-dir {blocker}/ckpt")
    assert result.returncode != 0 and not result.timed_out and not result.leftovers, result.describe()
    assert "is not writable" in result.stderr and "attempt 0" not in result.stdout, result.describe()


def test_stateful_dataloader_resumes_a_distributed_sampler_mid_epoch_with_workers():
    """What the checkpoint page says of torchdata's StatefulDataLoader: its state_dict, taken mid-epoch
    with 2 worker processes and loaded into a new loader, gives the batches an uninterrupted one gives."""
    import torch
    from torch.utils.data import DistributedSampler, TensorDataset
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(512, 4, generator=g), torch.arange(512))
        sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=0)  # no group needed
        return StatefulDataLoader(data, batch_size=16, sampler=sampler, num_workers=2), sampler

    whole, sampler = loader()
    expected = []
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        expected += [ids.tolist() for _, ids in whole]
    first, sampler = loader()
    sampler.set_epoch(0)
    got = [ids.tolist() for _, ids in first]
    sampler.set_epoch(1)
    batches = iter(first)
    got += [next(batches)[1].tolist() for _ in range(5)]  # 5 of the epoch's 16 batches, then a kill
    state = first.state_dict()
    del batches, first
    second, sampler = loader()
    second.load_state_dict(state)
    sampler.set_epoch(1)  # the epoch is the sampler's, not in the loader's state: set it as before
    got += [ids.tolist() for _, ids in second]
    assert got == expected


@pytest.mark.parametrize(
    ("command", "resumed"), [(NO_CHECKPOINT, 0), (NO_CHECKPOINT_EVERY_10, 20)], ids=["none", "every-10"]
)
def test_a_killed_rank_costs_every_step_without_checkpoints_and_few_with_them(command_runs, command, resumed):
    """The page's two commands, with rank 1 killed at step 25 as the page says: the restart starts at
    step 0 without checkpoints (25 steps lost), at step 20 with one every 10 (5 lost)."""
    result = command_runs.run_ok(command, fault="kill-rank=1 kill-at-step=25")
    assert "failed (exitcode: -9) local_rank: 1" in result.stderr, result.describe()  # rank 1 was SIGKILLed
    assert "[rank 1] SIGKILL at step 25" in result.stdout, result.describe()
    assert f"attempt 1: starting at step {resumed} of 40" in result.stdout, result.describe()


@pytest.mark.parametrize(("disabled", "found"), [("0", True), ("1", False)])
def test_a_restart_finds_the_dead_ranks_address_in_the_store_unless_sharing_is_disabled(command_runs, disabled, found):
    """torch 2.13: with the rendezvous store shared (the default since 2.5), the restarted attempt meets
    on the attempt before's store, where gloo's address of the dead rank still is; a restarted rank can
    dial it before the replacement publishes its own, and fail or wait out the timeout (the race of
    pytorch/pytorch#135712). With TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 every attempt has a fresh store."""
    result = command_runs.run_ok(
        f"TORCH_DISABLE_SHARE_RDZV_TCP_STORE={disabled} torchrun --standalone --nproc_per_node=2 --max-restarts=1 "
        "tests/faulty_scripts/restart_finds_old_store.py"
    )
    assert f"attempt 1: the dead rank's address is in the store: {found}" in result.stdout, result.describe()


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            "torchrun --standalone --nproc_per_node=2 examples/fault_tolerance/step06_no_checkpoint.py --ckpt-every -1",
            "error: --ckpt-every must be 0 or more and --step-seconds in 0..60",
        ),
        (
            "torchrun --standalone --nproc_per_node=2 examples/fault_tolerance/step05_checkpoint_on_time.py --every 0",
            "error: --every must be above 0 and below the run's 0.8 s",
        ),
    ],
)
def test_impossible_checkpoint_settings_get_one_line_and_exit_2(command, message):
    check_refusal(command, message)


def example_constant(name: str):
    tree = ast.parse((REPO / SCRIPT).read_text())
    found = [n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name]
    return ast.literal_eval(found[0])


def test_a_rank_whose_peer_is_stuck_leaves_on_its_own_before_killwait_after_sigterm(tmp_path):
    """SIGTERM to rank 0 while rank 1 is frozen (SIGSTOP: a peer that will never answer). Rank 0 cannot
    save without it. Its collective fails TIMEOUT_S after it began, under SLURM's default KillWait
    (30 s), and the rank leaves through Python's own shutdown, saying why, rather than waiting for
    SIGKILL. With gloo's default timeout (30 minutes) this test would fail."""
    timeout, killwait = example_constant("TIMEOUT_S"), 30
    assert timeout + 5 < killwait, "the example's timeout must leave time to exit before KillWait"
    command = ["torchrun", "--standalone", "--nproc_per_node=2", str(REPO / SCRIPT), "--step-seconds=0.3"]
    proc = subprocess.Popen(
        [*command, f"--ckpt-dir={tmp_path}"],
        cwd=tmp_path,
        env=command_env(gpu=False),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []

    def wait_for(pattern: str, within_s: float) -> float:
        end = time.monotonic() + within_s
        while time.monotonic() < end:
            try:
                seen.append(lines.get(timeout=0.1))
            except queue.Empty:
                continue
            if re.search(pattern, seen[-1]):
                return time.monotonic()
        raise AssertionError(f"no line matched {pattern!r} within {within_s} s:\n" + "".join(seen[-40:]))

    ranks = {}
    try:
        wait_for(r"attempt 0: starting at step 0", 120)
        for pid in pids():  # torchrun starts each worker in a session of its own
            if (stat := process_stat(pid)) and stat.ppid == proc.pid:
                environ = b"\x00" + Path(f"/proc/{pid}/environ").read_bytes()
                rank = re.search(rb"\x00RANK=(\d+)\x00", environ)
                ranks[int(rank.group(1))] = pid
        assert sorted(ranks) == [0, 1], ranks
        os.kill(ranks[1], signal.SIGSTOP)
        signalled = time.monotonic()
        os.kill(ranks[0], signal.SIGTERM)
        said = wait_for(r"\[rank 0\] SIGTERM, and a peer did not answer: no checkpoint; leaving", timeout + 15)
        assert timeout - 2 <= said - signalled <= timeout + 5, f"said so {said - signalled:.1f} s after SIGTERM"
        assert not any("SIGTERM: saved" in line for line in seen)
        end = time.monotonic() + 10  # then it exits through Python's shutdown, not by a signal of ours
        while (stat := process_stat(ranks[0])) and stat.state != "Z" and time.monotonic() < end:
            time.sleep(0.1)
        assert not stat or stat.state == "Z", "rank 0 said it was leaving, and did not leave"
    finally:
        for pid in ranks.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        kill_session(proc.pid)
        proc.wait(timeout=30)


def test_a_fault_is_named_word_by_word_and_fires_once_per_run(tmp_path):
    env = fault_env("kill-rank=1 kill-at-step=13 kill-launcher", tmp_path / "fired")
    assert env == {
        "DISTDOCS_FAULT_ONCE": str(tmp_path / "fired"),
        "DISTDOCS_FAULT_KILL_RANK": "1",
        "DISTDOCS_FAULT_KILL_AT_STEP": "13",
        "DISTDOCS_FAULT_KILL_LAUNCHER": "1",
    }
    with pytest.raises(ValueError, match="unknown fault 'kill-everything'"):
        fault_env("kill-everything", tmp_path / "fired")
