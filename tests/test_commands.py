"""The doc tests' command runner: nothing hangs, a crash at exit counts as a failure, nothing is left
running, and a command that names an example runs it as a reader's copy, with torch alone."""

from __future__ import annotations

import pytest

from distdocs.processes import session_members

from docexec.commands import run_command
from docexec.rule import problems
from docexec.shared_runs import CommandRuns

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
    result = CommandRuns().run(f"torchrun --standalone --nproc_per_node=2 {SCRIPTS}/abort_at_exit.py")
    assert "self-check passed" in result.stdout, result.describe()
    assert any("aborted" in p or "exit code" in p for p in problems(result)), result.describe()


def test_an_example_command_sees_only_the_distdocs_modules_examples_may_import():
    script = "examples/collectives/step02_ring_allreduce.py"
    probe = (
        f"python -c \"import os; print(sorted(os.listdir('examples/collectives')))\" && "
        f"python -c 'import distdocs.training.collectives, distdocs.training.ddp, distdocs.training.pipeline' && "
        f"python -c 'import distdocs.calculators.memory' # {script}"
    )
    result = CommandRuns().run(probe)
    assert result.stdout.splitlines() == ["['step02_ring_allreduce.py']"], result.describe()
    assert "No module named 'distdocs.calculators'" in result.stderr, result.describe()


def _side_by_side(*calls):
    """Run each call in its own thread, all at once, as parallel test workers would; their results."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(call) for call in calls]]


def test_workers_that_share_a_folder_run_a_command_once_and_share_its_result(tmp_path):
    shared, counter = tmp_path / "shared", tmp_path / "runs"
    command = f"echo run >> {counter}; sleep 1; echo done"
    a, b = CommandRuns(shared), CommandRuns(shared)  # two workers' runners
    first, second = _side_by_side(lambda: a.run(command), lambda: b.run(command))
    assert counter.read_text().splitlines() == ["run"]  # it ran once
    assert (first.stdout, first.pid) == (second.stdout, second.pid) == ("done\n", first.pid)


def test_two_spellings_of_one_launch_run_once_for_every_worker(tmp_path):
    """Runs are shared by docexec.shared_runs.launch_key: python's options in another order are the
    same launch, in the runner that ran it and in another worker's."""
    counter = tmp_path / "runs"
    code = f"open('{counter}', 'a').write('run\\n')"
    a, b = CommandRuns(tmp_path / "shared"), CommandRuns(tmp_path / "shared")
    first = a.run(f'python -u -B -c "{code}"')
    assert a.run(f'python -B -u -c "{code}"') is first and b.run(f'python -B -u -c "{code}"').pid == first.pid
    assert counter.read_text().splitlines() == ["run"], first.describe()
    a.run(f'python -B -u -c "{code}" again')  # an argument more: a launch of its own
    assert counter.read_text().splitlines() == ["run", "run"]


def test_commands_that_fix_the_same_port_never_overlap_across_workers(tmp_path):
    shared, log = tmp_path / "shared", tmp_path / "log"
    # Two different commands that name one port, as two pages' torchrun lines with --master_port might.
    commands = [f"echo start >> {log}; sleep 1; echo end >> {log} # --master_port=29599 {name}" for name in "ab"]
    runners = [CommandRuns(shared), CommandRuns(shared)]
    _side_by_side(*[lambda r=r, c=c: r.run(c) for r, c in zip(runners, commands)])
    assert log.read_text().splitlines() == ["start", "end", "start", "end"]  # one after the other


def test_a_process_left_by_one_command_is_not_blamed_on_another_running_beside_it(tmp_path):
    runs = CommandRuns(tmp_path / "shared")
    leaves, clean = "sleep 30 & sleep 1; echo left", "sleep 2; echo clean"
    left, ok = _side_by_side(lambda: runs.run(leaves), lambda: CommandRuns(tmp_path / "shared").run(clean))
    assert any("sleep 30" in p for p in left.leftovers), left.describe()
    assert ok.leftovers == [] and ok.returncode == 0, ok.describe()


def test_a_copied_out_run_reports_the_readers_files_it_changed_or_removed():
    """What test_examples.py asserts of every example: the run's folder starts with files of the
    reader's own (a `checkpoints/` folder among them), and a run that deletes or rewrites one says so."""
    script = "examples/collectives/step02_ring_allreduce.py"
    wipe = f"python -c \"import shutil; shutil.rmtree('checkpoints'); open('notes.txt', 'w').write('x')\" # {script}"
    result = CommandRuns().run(wipe)
    assert result.returncode == 0, result.describe()
    assert "notes.txt (changed)" in result.disturbed and any("checkpoints/" in d for d in result.disturbed)
    assert not CommandRuns().run(f"python -c 'print(1)' # {script}").disturbed
