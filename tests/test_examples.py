"""Every script in examples/ runs the way a reader runs it: the torchrun command in its docstring,
from the repository root, in a subprocess with a hard timeout. It must exit 0, leave nothing running,
and reach the end of its self-check."""

from __future__ import annotations

import pytest

from markdown_fences import EXAMPLES, REPO, all_examples, example_command

EXAMPLE_SCRIPTS = all_examples()


def test_there_are_examples():
    assert EXAMPLE_SCRIPTS, "no examples found under examples/"


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=[str(p.relative_to(EXAMPLES)) for p in EXAMPLE_SCRIPTS])
def test_example_passes_its_self_check(script, command_runs, record_property):
    command = example_command(script)
    assert str(script.relative_to(REPO)) in command, f"the docstring's command does not launch {script.name}"
    result = command_runs.run_ok(command)
    # The self-check asserts the page's claim and only then prints this line: a run that skipped
    # its checks cannot pass.
    assert "self-check passed" in result.stdout.splitlines(), result.describe()
    record_property("executed", "examples")
