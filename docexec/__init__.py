"""docexec: the engine that executes distdocs' pages, so that every line of code a reader sees has run.

The idea in one sentence: a page is a test. Every fenced block in docs/ is classified, and each kind
has one way to be checked; a block that no check covers fails the suite.

**1. Classify the fences** (`docexec.fences`). `classify(page)` reads a Markdown page and returns its
fences, each with a `kind`:

- `include`: the block pulls in a section of an example (`--8<-- "data_parallel/step01...py:setup"`);
  the example itself is run, as a whole.
- `inline`: a small Python block; pytest-markdown-docs runs it in the test process.
- `command`: a shell block of `torchrun`, `python` or `distdocs` lines; it is run exactly as written.
- `output` and `excerpt`: a `text` block titled "Output" (all that the command above prints) or
  "Excerpt" (lines among others, such as an error); they are compared with a fresh run.
- `node command`: one of the commands two machines would run (`node="ADDRESS"`); tests run them
  together, each in a network namespace with that address.
- `not executed`: under `<!-- not executed: REASON -->`, for `make` itself and installs. Keep rare.

`all_fences()` covers every page, `all_examples()` every script under examples/, and
`example_command(script)` is the launch line in an example's docstring.

**2. Run commands as a reader would** (`docexec.commands`). `CommandRuns` runs each distinct command
once per test session, in its own process session, with a hard timeout, and kills whatever it leaves.
A command that names files under examples/ runs in an empty folder that holds copies of those files
and nothing else of this repository, so that it passes only if the examples work when copied out.
Every launched Python process loads an exit probe (`exit_probe/`) that reports a process group that
outlived `destroy_process_group`, the cause of aborts at exit. Its checks fail the test with the
run's report:

- `run_ok(command)`: exit code 0, in time, no process left, no abort, no group left alive;
- `run_failing(command, exit_code, within_s)`: a command meant to fail, as the debugging guide's do;
- `run_usage_error(command, message)`: bad settings refused in one line from rank 0, exit code 2;
- `run(command)`: the result alone (`CommandResult`: exit code, streams, time, leftovers).

`Background(command, log)` starts a command that a test watches while it runs (to dump a stuck
rank's stack, or to kill a node), and kills what it started when the `with` block ends.

Under pytest-xdist, `CommandRuns(shared=folder)` runs a command once for all workers (a file lock and
a saved result), and commands that fix the same port never overlap.

**3. Compare outputs** (`docexec.outputs`). `output_mismatch(shown, actual)` compares a page's Output
block with a fresh run line by line, numbers at the precision they are printed at: a float may
differ by one unit in its last digit, and nothing more. `excerpt_missing` does the same for lines
that must appear among others.

**4. Read the code for what CPU runs cannot show** (`docexec.device_check`). CI has no GPU, so
`check_file(path, root)` reads an example for the mistakes that pass on gloo and break on nccl: a CPU
tensor in a collective, a model that DDP wraps but never moved, a clock read without a synchronize.

The tests in tests/ use these pieces; `tools/gpu_check.py` uses them to run the same commands with
nccl on a machine with GPUs.
"""
