"""The examples end with a plain main() and Python's normal shutdown: what a reader's own training
script hangs on it (atexit handlers, non-daemon threads, DataLoader workers) still happens after a
run that used a process group. The same script ended with os._exit(0), as the examples once were,
loses the handler's file and the thread's: this test can fail. (Its DataLoader workers end either way:
they watch their parent.)"""

from __future__ import annotations

import pytest

from docexec.rule import GROUP_OUTLIVED_MARKER, KNOWN_GROUP_OUTLIVERS, problems
from support.launches import example_launch

pytestmark = pytest.mark.processes  # the test tier: see the testing page

SCRIPT = "tests/exit_scripts/normal_exit.py"
WRITTEN = 40 * 16384 + len(b"END\n")  # what the writer thread writes in full


def what_survived(folder, rank: int) -> tuple[bool, bool]:
    """Whether rank `rank`'s atexit handler ran, and whether its thread's file is complete."""
    handler = (folder / f"atexit-{rank}").is_file()
    thread_file = folder / f"thread-{rank}"
    complete = thread_file.is_file() and thread_file.stat().st_size == WRITTEN
    return handler, complete and thread_file.read_bytes().endswith(b"END\n")


def launch(folder, *flags: str) -> str:
    """The script's launch, with its temporary files in `folder`: the loader's workers, ended at exit,
    leave behind the folders multiprocessing made for the listeners they shared tensors through
    (pymp-*), and after os._exit torchrun's and inductor's folders stay too."""
    return f"TMPDIR={folder} torchrun --standalone --nproc_per_node=2 {SCRIPT} --out {folder} {' '.join(flags)}".strip()


def test_a_normal_exit_runs_atexit_joins_threads_and_leaves_no_process(command_runs, tmp_path):
    result = command_runs.run_ok(launch(tmp_path))
    for rank in (0, 1):
        handler, complete = what_survived(tmp_path, rank)
        assert handler, f"rank {rank}: the atexit handler did not run\n{result.describe()}"
        assert complete, f"rank {rank}: the non-daemon thread's file is incomplete\n{result.describe()}"
    # run_ok has also checked that no process is left (the loader's workers included) and that no
    # rank aborted at exit.


def test_os_exit_loses_what_the_normal_exit_keeps(command_runs, tmp_path):
    result = command_runs.run(launch(tmp_path, "--os-exit"))
    assert result.returncode == 0, result.describe()
    for rank in (0, 1):
        assert what_survived(tmp_path, rank) == (False, False), result.describe()


def test_the_exit_probe_reports_a_group_that_outlives_destroy(command_runs):
    """Every command the tests launch carries docexec/exit_probe; run_ok fails a run whose group
    outlived destroy_process_group. Here a script holds its group, as a library cache would."""
    result = command_runs.run("torchrun --standalone --nproc_per_node=2 tests/faulty_scripts/group_outlives_destroy.py")
    assert result.stderr.count(GROUP_OUTLIVED_MARKER) == 2, result.describe()  # one line per rank
    assert any("outlived destroy_process_group" in p for p in problems(result)), result.describe()


@pytest.mark.parametrize("command", list(KNOWN_GROUP_OUTLIVERS))
def test_a_known_group_that_outlives_destroy_still_does(command_runs, command):
    """The exemptions in docexec/rule.py hold only while their reason does: the day this fails, the
    library fixed it; drop the exemption."""
    result = command_runs.run_ok(example_launch(*command.split()))  # the example's docstring launch
    assert GROUP_OUTLIVED_MARKER in result.stderr, (
        f"{KNOWN_GROUP_OUTLIVERS[command]}: no longer true\n{result.describe()}"
    )
