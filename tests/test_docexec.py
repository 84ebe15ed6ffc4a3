"""The engine itself (docexec), apart from the pages it executes: what it may import, the rule that
judges a finished run (docexec.rule, docexec.refusals), on runs made up here, and the key that runs
are shared by (docexec.shared_runs.launch_key)."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from distdocs.processes import ABORT_MARKERS

from docexec.commands import CommandResult
from docexec.fences import REPO
from docexec.refusals import usage_error_problems
from docexec.rule import GROUP_OUTLIVED_MARKER, KNOWN_GROUP_OUTLIVERS, Expected, problems
from docexec.shared_runs import launch_key

pytestmark = pytest.mark.fast  # the test tier: see the testing page


def test_the_engine_imports_no_pytest():
    """docexec runs outside pytest too (tools/gpu_check.py, tools/torch_check.py): what fails a test
    lives in tests/support/runs.py."""
    for path in sorted((REPO / "docexec").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {n for n in names if n.split(".")[0] == "pytest"}, f"{path.relative_to(REPO)} imports pytest"


# --- docexec.rule: one test per problem it reports, each on a run that differs from a clean one in one field ---

EXAMPLE = "torchrun --standalone --nproc_per_node=2 examples/x/step01_y.py"
CLEAN = CommandResult(EXAMPLE, 0, "loss 0.5\nself-check passed\n", "rank 0: done\n", elapsed_s=5.0, pid=1)
EXPECTED = Expected(within_s=10, self_check=True)


def test_a_clean_run_shows_no_problem_with_every_check_armed():
    armed = replace(EXPECTED, output="loss 0.5\nself-check passed", excerpt="rank 0: done")
    assert problems(CLEAN, armed) == []
    assert problems(CLEAN, EXPECTED) == []


ONE_FIELD_CHANGED = [
    pytest.param({"timed_out": True}, "timed out after 5 s", id="timeout"),
    pytest.param({"returncode": 1}, "exit code 1, not 0", id="exit-code"),
    pytest.param({"elapsed_s": 11.0}, "took 11.0 s, over the 10 s it must end within", id="within"),
    pytest.param({"leftovers": ["123 sleep 30"]}, "left processes running", id="leftovers"),
    *[
        pytest.param({"stderr": f"{m}\n"}, f"a process aborted ({m!r} in stderr)", id=f"abort-{m}")
        for m in ABORT_MARKERS
    ],
    pytest.param({"stderr": GROUP_OUTLIVED_MARKER}, "a process group outlived destroy_process_group", id="outlived"),
    pytest.param({"stdout": "loss 0.5\n"}, 'no "self-check passed" line', id="no-self-check"),
    pytest.param({"stdout": "self-check passed (2 of 3)\n"}, 'no "self-check passed" line', id="self-check-not-alone"),
]


@pytest.mark.holds(
    "docs/appendix/testing.md",
    "It must exit 0 and print `self-check passed`, after assertions that check the page's claim.",
)
@pytest.mark.holds(
    "docs/appendix/testing.md",
    '`exit="1"` is the exit code it must end with and `within="60"` the seconds it must end within',
)
@pytest.mark.holds("docs/appendix/testing.md", "It must not leave a process behind or abort.")
@pytest.mark.parametrize(("changed", "found"), ONE_FIELD_CHANGED)
def test_a_run_that_differs_from_a_clean_one_in_one_field_has_that_one_problem(changed, found):
    """Each check of the rule fails its own case here, and only it: drop one from rule.py and one case fails."""
    reported = problems(replace(CLEAN, **changed), EXPECTED)
    assert len(reported) == 1 and reported[0].startswith(found), reported


@pytest.mark.parametrize(
    ("shown", "found"),
    [
        pytest.param({"output": "loss 0.9\nself-check passed"}, "output: ", id="output"),
        pytest.param({"excerpt": "rank 0: failed"}, "excerpt: ", id="excerpt"),
    ],
)
def test_a_page_block_the_run_does_not_print_is_the_one_problem(shown, found):
    reported = problems(CLEAN, replace(EXPECTED, **shown))
    assert len(reported) == 1 and reported[0].startswith(found), reported


def test_a_known_group_outliver_is_exempt_from_the_exit_probe():
    """The case `outlived` above, run by a command in KNOWN_GROUP_OUTLIVERS, each of which has its reason."""
    known = next(iter(KNOWN_GROUP_OUTLIVERS))
    outliver = replace(CLEAN, command=f"torchrun --standalone --nproc_per_node=2 {known}", stderr=GROUP_OUTLIVED_MARKER)
    assert problems(outliver, EXPECTED) == []


REFUSING = "torchrun --standalone --nproc_per_node=3 examples/model_parallel/step01_split_layers.py"
MESSAGE = "error: this example needs exactly 2 processes, got 3"
REFUSED = CommandResult(REFUSING, 1, "", f"{MESSAGE}\n[...]\n  exitcode  : 2 (pid: 7)\n", elapsed_s=4.0, pid=1)


def test_a_refusal_is_said_once_without_a_traceback_from_the_script():
    assert usage_error_problems(REFUSED, MESSAGE) == []
    twice = replace(REFUSED, stderr=f"{MESSAGE}\n{REFUSED.stderr}")
    assert usage_error_problems(twice, MESSAGE) == [f"said {MESSAGE!r} 2 times, not once"]
    traceback = 'Traceback (most recent call last):\n  File "/tmp/step01_split_layers.py", line 9, in <module>\n'
    traced = replace(REFUSED, stderr=REFUSED.stderr + traceback)
    assert usage_error_problems(traced, MESSAGE) == ["step01_split_layers.py printed a traceback"]


# --- docexec.shared_runs.launch_key: what a run is shared by ---


def test_two_spellings_of_one_launch_have_one_key_and_another_argument_another():
    script = "examples/x/step01_y.py --steps 4"
    key = launch_key(f"B=2 A=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 {script}")
    assert launch_key(f"A=1 B=2 torchrun --max_restarts 1 --nproc-per-node 2 --standalone {script}") == key
    assert launch_key(f"A=1 B=2 torchrun --standalone --nproc_per_node=2 --max-restarts=1 {script} --x") != key
    assert launch_key(f"A=1 B=2 torchrun --standalone --nproc_per_node=2 --max-restarts=1 {script[:-1]}8") != key
    assert launch_key(f"A=1 B=2 torchrun --standalone --nproc_per_node=4 --max-restarts=1 {script}") != key
    assert launch_key("python  -c 'print(1)'") == launch_key('python -c "print(1)"')
    # Not one launch: the command itself, so that only the same text shares its run.
    for command in (f"torchrun --standalone {script} && echo done", "sleep 1 & wait", "python -c 'print(1)' # x.py"):
        assert launch_key(command) == command
