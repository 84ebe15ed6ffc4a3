"""docexec: the engine that executes distdocs' pages, so that the code a reader sees has run.

The idea in one sentence: a page is a test. Every fenced block in docs/ is classified, and each kind
has one way to be checked; a block that no check covers fails the suite.

**1. Classify the fences** (`docexec.fences`). `classify(page)` reads a Markdown page and returns its
fences, each with a `kind`: an include of an example, an inline block, a command, the Output or
Excerpt after a command, a node's or a SLURM cluster's command, or one not executed (with its
reason). `docexec.fences.KINDS` is the list, with what each kind is; a fence of none of them fails
the suite. `all_fences()` covers every page, `all_examples()` every script under examples/,
`example_command(script)` is the launch line in an example's docstring, and
`page_command(page, text)` the one command fence of a page that a test checks by what it prints.
`docexec.claims` reads the tests for those calls: the fences that tests claim.

**2. Run commands as a reader would**, each job in a module of its own:

- `docexec.commands`: run one shell command in its own process session, with a hard timeout, and
  kill whatever it leaves (`run_command`, and `Background` for one a test watches while it runs).
  Every launched Python process loads an exit probe (`docexec/exit_probe/`) that reports a gloo
  process group that outlived `destroy_process_group`, the cause of aborts at exit.
- `docexec.copies`: a command that names files under examples/ runs in an empty folder that holds
  copies of those files beside a reader's own files, and of this repository only
  `distdocs.training`, the modules examples may import (`ALLOWED_IN_EXAMPLES`, read from that
  folder), so that it passes only if the examples work when copied out; and it must leave the
  reader's files as they were.
- `docexec.fault_injection`: a run may ask for a fault (`fault=` on a page's command fence);
  `docexec/faults/` then takes the probe's place on the path, loads it, and SIGKILLs a rank at a
  step or cuts a checkpoint write short, once per run, so that the examples carry no fault of their own.
- `docexec.shared_runs`: `CommandRuns` runs each launch once per test session, keyed by
  `launch_key` (settings, launcher, script and arguments, however the launcher's options are
  spelled), so that a page, a docstring and a test share it; under pytest-xdist, once for all workers
  (a file lock and a saved result), and commands that fix the same port never overlap.
- `docexec.refusals`: how an example refuses bad settings (one line, exit code 2, before any
  process group), checked in this process in milliseconds or from a real launch.

None of these imports pytest (only `fences` asks pytest-markdown-docs, lazily, which inline fences
it will run). The tests wrap them (tests/support/runs.py): `run_ok`, `run_failing`,
`run_usage_error` and `check_refusal` fail a test with the run's report.

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

**5. One rule for a finished run** (`docexec.rule`): `problems(result, expected)` lists what a run
did wrong (exit code, timeout, leftovers, an abort, a group that outlived its destroy, the missing
self-check line, the Output or Excerpt). The tests, `tools/gpu_check.py` (every GPU tab and example
under nccl) and `tools/torch_check.py` (every example under another torch) all apply it.
"""
