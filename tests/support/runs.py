"""The command runner as the tests use it: docexec's runs and refusals, failing the test with the
run's report when docexec.rule finds anything wrong. docexec itself knows nothing of pytest, so that
tools/gpu_check.py and tools/torch_check.py apply the same rule outside the tests."""

from __future__ import annotations

import pytest

from docexec.commands import CommandResult
from docexec.refusals import refusal_problems, usage_error_problems
from docexec.rule import EXIT_0, Expected, problems
from docexec.shared_runs import CommandRuns


def fail_with(result: CommandResult, found: list[str]) -> CommandResult:
    """Fail the test with the run's report if anything was found; else return the result."""
    if found:
        pytest.fail("; ".join(found) + "\n" + result.describe(), pytrace=False)
    return result


class CheckedRuns(CommandRuns):
    """CommandRuns (one run per launch for the session, docexec.shared_runs.launch_key) whose methods fail the test:

    - `run_ok(command)`: exit code 0, in time, no process left, no abort, no group left alive (but for
      the few KNOWN_GROUP_OUTLIVERS, each with its reason), and what `expected` adds;
    - `run_failing(command, exit_code, within_s)`: a command meant to fail, as the debugging guide's do;
    - `run_usage_error(command, message)`: bad settings refused in one line from rank 0, exit code 2;
    - `run(command)`, inherited: the result alone."""

    def run_ok(
        self,
        command: str,
        gpu: bool = False,
        busy_port: int | None = None,
        expected: Expected = EXIT_0,
        fault: str | None = None,
    ) -> CommandResult:
        """Run, and fail the test unless the run shows what `expected` says (by default: exit code 0),
        in time, leaving nothing behind, with every process group freed by its destroy_process_group.
        `fault`: inject it into the ranks (docexec.fault_injection)."""
        result = self.run(command, gpu, busy_port, fault)
        return fail_with(result, problems(result, expected))

    def run_failing(
        self, command: str, exit_code: int, within_s: float, busy_port: int | None = None, fault: str | None = None
    ) -> CommandResult:
        """Run a command that is meant to fail, and fail the test unless it ended with `exit_code`
        within `within_s` seconds, leaving nothing behind and without aborting."""
        result = self.run(command, busy_port=busy_port, fault=fault)
        return fail_with(result, problems(result, Expected(exit_code, within_s)))

    def run_usage_error(self, command: str, message: str) -> CommandResult:
        """Run a command given impossible settings, and fail the test unless it refused them the way
        every example must (docexec.refusals.usage_error_problems)."""
        result = self.run(command)
        return fail_with(result, usage_error_problems(result, message))


def check_refusal(command: str, message: str) -> None:
    """Fail the test unless the example in `command`, run in this process as rank 0, refuses with
    `message` as the one line of its stderr and exit code 2 (docexec.refusals). One torchrun launch
    per refusal mechanism stays (CheckedRuns.run_usage_error), for torchrun's own report of it."""
    found = refusal_problems(command, message)
    if found:
        pytest.fail(found[0], pytrace=False)
