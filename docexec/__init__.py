"""docexec: the engine that executes distdocs' pages, so that the code a reader sees has run.

The idea in one sentence: a page is a test. Every fenced block in docs/ is classified, and each kind
has one way to be checked; a block that no check covers fails the suite.

**1. Classify the fences** (`docexec.fences`). `classify(page)` reads a Markdown page and returns its
fences, each with a `kind`: an include of an example, an inline block, a command, the Output or
Excerpt after a command, a node's or a SLURM cluster's command, or one not executed (with its
reason). `docexec.fences.KINDS` is the list, with what checks each kind; a fence of none of them
fails the suite. `all_fences()` covers every page, `all_examples()` every script under examples/,
`example_command(script)` is the launch line in an example's docstring, and
`page_command(page, text)` the one command fence of a page that a test checks by what it prints.

**2. Run commands as a reader would** (`docexec.commands`). `CommandRuns` runs each distinct command
once per test session, in its own process session, with a hard timeout, and kills whatever it leaves.
A command that names files under examples/ runs in an empty folder that holds copies of those files
and, of this repository, only the `distdocs` modules that examples may import (ALLOWED_IN_EXAMPLES),
so that it passes only if the examples work when copied out. Every launched Python process loads an
exit probe (`docexec/exit_probe/`) that reports a gloo process group that outlived
`destroy_process_group`, the cause of aborts at exit. A run may ask for a fault (`fault=` on a page's
command fence, `CommandRuns.run(..., fault=...)`): `docexec/faults/` then takes the probe's place on
the path, loads it, and SIGKILLs a rank at a step or cuts a checkpoint write short, once per run, so
that the examples carry no fault of their own. Tests get one `CommandRuns` for the session
from the `command_runs` fixture (tests/conftest.py); its methods fail the test with the run's report:

- `run_ok(command)`: exit code 0, in time, no process left, no abort, no group left alive (but for
  the few GROUP_OUTLIVES_DESTROY names, each with its reason);
- `run_failing(command, exit_code, within_s)`: a command meant to fail, as the debugging guide's do;
- `run_usage_error(command, message)`: bad settings refused in one line from rank 0, exit code 2;
- `run(command)`: the result alone (`CommandResult`: exit code, streams, time, leftovers).

`Background(command, log)` starts a command that a test watches while it runs (to dump a stuck
rank's stack, or to kill a node), and kills what it started when the `with` block ends.

Under pytest-xdist, `CommandRuns(shared=folder)` runs a command once for all workers (a file lock and
a saved result), and commands that fix the same port never overlap.

**3. Compare outputs** (`docexec.outputs`). `output_mismatch(shown, actual)` compares a page's Output
block with a fresh run line by line, numbers at the precision they are printed at: a float may
differ by one unit in its last digit shown, rounding noise shown as `3e-08` may be any value up to
the page's, and a SHA-256 digest is only checked to be one. `excerpt_missing` checks that each line
of an Excerpt appears in the run's output, its numbers (pids, ports, times) left out.
`pytest --update-outputs` rewrites the Output blocks with what the commands print now.

**4. Read the code for what CPU runs cannot show** (`docexec.device_check`). CI has no GPU, so
`check_file(path, root)` reads an example for the mistakes that pass on gloo and break on nccl: a CPU
tensor in a collective, a model that DDP wraps but never moved, a clock read without a synchronize, a
collective's answer read back on the host at every training step.

The tests in tests/ use these pieces, and every test carries one tier marker (fast, processes, site;
see tests/conftest.py). `tools/gpu_check.py` uses the runner to launch the GPU tabs' commands and
every example with nccl on a machine with GPUs, and checks their exits.
"""
