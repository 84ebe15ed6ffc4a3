"""The one rule for a finished run: what it must show, and the list of ways it did not.

A run is a `docexec.commands.CommandResult`: a command that ran in a session of its own, with a hard
timeout, every Python process in it carrying the exit probe. `problems(result, expected)` checks it
against an `Expected` and returns what is wrong, in words, or an empty list:

- the exit code, and for a command meant to fail, the time it must end within;
- the timeout;
- processes left running after the command ended;
- an abort (`terminate called`, SIGABRT) in stderr;
- the exit probe's report of a process group that outlived `destroy_process_group`, which makes a
  rank abort at exit now and then, unless the command is one of the known exceptions;
- "self-check passed" on a line of its own, where the command runs an example (every example ends
  with its self-check, and prints the line only after its assertions);
- the page's Output block (compared line by line, numbers at their printed precision) or Excerpt
  (each line somewhere in the run, numbers left out).

The tests wrap it (tests/support/runs.py: `CheckedRuns.run_ok` and the others fail a test with its
problems), and `tools/gpu_check.py` and `tools/torch_check.py` apply the same function to their runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from distdocs.processes import ABORT_MARKERS

from docexec.outputs import excerpt_missing, output_mismatch

SELF_CHECK = "self-check passed"
# Every launched Python process imports docexec/exit_probe/sitecustomize.py, which prints this at exit
# if a process group outlived destroy_process_group (the cause of the crash at exit).
GROUP_OUTLIVED_MARKER = "gloo threads outlived destroy_process_group"
# Commands whose process group outlives destroy_process_group for a reason outside this repository, with
# the reason. The exit soak (make exit-soak) launches each of them and counts its aborts, and a test in
# test_normal_exit.py fails the day the reason no longer holds.
KNOWN_GROUP_OUTLIVERS = {
    "examples/launchers/step02_deepspeed_zero.py --zero-stage 3": (
        "DeepSpeed 0.19.8's ZeRO-3 keeps its parameters, which hold the group, alive after engine.destroy() "
        "and a garbage collection"
    ),
}


@dataclass(frozen=True)
class Expected:
    """What a run must show. The defaults: exit code 0, and nothing else shown."""

    exit_code: int = 0
    within_s: float | None = None  # a command meant to fail must end within this many seconds
    self_check: bool = False  # the run is an example's: "self-check passed" on a line of stdout
    output: str | None = None  # the page's Output block: all of stdout
    excerpt: str | None = None  # the page's Excerpt: lines among stdout and stderr


EXIT_0 = Expected()  # the default: exit code 0, nothing else shown


def problems(result, expected: Expected = EXIT_0) -> list[str]:
    """Everything that `result` (a CommandResult) shows against `expected`, in words; [] for a good run."""
    found = []
    if result.timed_out:
        found.append(f"timed out after {result.elapsed_s:.0f} s")
    elif result.returncode != expected.exit_code:
        found.append(f"exit code {result.returncode}, not {expected.exit_code}")
    if expected.within_s is not None and not result.timed_out and result.elapsed_s > expected.within_s:
        found.append(f"took {result.elapsed_s:.1f} s, over the {expected.within_s} s it must end within")
    if result.leftovers:
        found.append("left processes running")
    abort = next((m for m in ABORT_MARKERS if m in result.stderr), None)
    if abort:
        found.append(f"a process aborted ({abort!r} in stderr)")
    if GROUP_OUTLIVED_MARKER in result.stderr and not any(k in result.command for k in KNOWN_GROUP_OUTLIVERS):
        found.append("a process group outlived destroy_process_group: its gloo threads race the exit")
    if expected.self_check and SELF_CHECK not in result.stdout.splitlines():
        found.append(f'no "{SELF_CHECK}" line: the example\'s self-check did not finish')
    if expected.output is not None and (why := output_mismatch(expected.output, result.stdout)):
        found.append(f"output: {why}")
    if expected.excerpt is not None and (why := excerpt_missing(expected.excerpt, result.stdout + result.stderr)):
        found.append(f"excerpt: {why}")
    return found
