"""The doc tests' command runner: nothing hangs, a crash at exit counts as a failure, nothing is left
running, and a command that names an example runs it as a reader's copy, with torch alone."""

from __future__ import annotations

import pytest

from docexec.commands import CommandRuns, run_command, session_members

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPTS = "tests/faulty_scripts"


def test_run_command_kills_the_whole_tree_on_timeout():
    result = run_command("sleep 100 & sleep 100", timeout_s=1)
    assert result.timed_out
    assert result.elapsed_s < 10
    assert not session_members(result.pid), "the background sleep outlived the timeout"


def test_run_command_reports_processes_left_behind():
    result = run_command("sleep 30 & echo started", timeout_s=10)
    assert result.returncode == 0 and not result.timed_out
    assert any("sleep 30" in p for p in result.leftovers)
    assert not session_members(result.pid)


def test_torchrun_stops_at_the_failing_rank_and_shows_its_traceback():
    result = CommandRuns().run(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/rank_raises.py")
    assert result.returncode != 0 and not result.timed_out
    assert "ValueError: boom from rank 1" in result.stderr
    assert not result.leftovers
    assert result.elapsed_s < 60  # the script's 60 s collective timeout, not gloo's 30 minutes


def test_a_rank_that_aborts_at_exit_fails_the_run_even_after_success():
    runs = CommandRuns()
    with pytest.raises(pytest.fail.Exception, match="exit code|aborted"):
        runs.run_ok(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/abort_at_exit.py")
    assert (
        "self-check passed" in runs.run(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/abort_at_exit.py").stdout
    )


def test_an_example_command_sees_only_the_distdocs_modules_examples_may_import():
    script = "examples/collectives/step02_ring_allreduce.py"
    probe = (
        f"python -c \"import os; print(sorted(os.listdir('examples/collectives')))\" && "
        f"python -c 'import distdocs.collectives, distdocs.ddp, distdocs.pipeline' && "
        f"python -c 'import distdocs.memory' # {script}"
    )
    result = CommandRuns().run(probe)
    assert result.stdout.splitlines() == ["['step02_ring_allreduce.py']"], result.describe()
    assert "No module named 'distdocs.memory'" in result.stderr, result.describe()
