"""The launches that several tests share, named once: a test that checks a run which a page, an
example's docstring or another test also makes imports its name from here instead of typing the
command again. CommandRuns shares one run among the spellings of one launch (docexec.shared_runs.
launch_key), but a copy typed with one flag more is another launch: a second run of the same example,
unseen. tests/test_docs.py fails on such a double.

Each name is the example's own docstring command (`example_launch`), or that command with other
arguments, so that a change to the docstring moves every test with it."""

from __future__ import annotations

import shlex

from docexec.fences import REPO, example_command


def example_launch(script: str, *args: str) -> str:
    """The launch command in the docstring of `script` (examples/...py); with `args`, the same command
    with these arguments in place of the docstring's."""
    command = example_command(REPO / script)
    if not args:
        return command
    return command[: command.index(script) + len(script)] + " " + shlex.join(args)


# step01 as its docstring launches it, restarts allowed. Run plain, it gives the weights that every resumed
# run must end with (test_fault_tolerance.py, test_multi_node.py, test_slurm.py) and passes its self-check
# (test_examples.py); with a fault injected, it is the checkpoint page's kills and test_fault_tolerance.py's.
RESUME_AFTER_KILL = example_launch("examples/fault_tolerance/step01_resume_after_kill.py")
# step06 with rank 1 killed at step 25 (the page's fault): without checkpoints, and with one every 10 steps.
NO_CHECKPOINT = example_launch("examples/fault_tolerance/step06_no_checkpoint.py")
NO_CHECKPOINT_EVERY_10 = example_launch("examples/fault_tolerance/step06_no_checkpoint.py", "--ckpt-every", "10")
# The 2 x 2 x 2 mesh on 8 ranks, the suite's largest launch: the in-production page's run, the example's
# self-check, and test_in_production.py's count of each dimension's calls.
MESH_3D = example_launch("examples/in_production/step02_3d_mesh.py")
# The convert page's two conversions, each script beside its distributed version: the page's outputs, the
# examples' self-checks, and test_convert.py's comparisons of the two.
CONVERT_ONE_PROCESS = example_launch("examples/convert/step01_one_process.py")
CONVERT_DDP = example_launch("examples/convert/step02_ddp.py")
TOKEN_STREAM_ONE_PROCESS = example_launch("examples/convert/step04_token_stream_one_process.py")
TOKEN_STREAM_DDP = example_launch("examples/convert/step05_token_stream_ddp.py")
TOKEN_STREAM_DDP_FLOAT64 = example_launch("examples/convert/step05_token_stream_ddp.py", "--dtype", "float64")
# Two forwards before one backward, the buffer sync and the in-place error; the DataLoader workers' seeds: the
# page's outputs, the examples' self-checks, and test_convert.py's checks of the sentences beside them.
TWO_FORWARDS = example_launch("examples/convert/step06_two_forwards.py")
SEEDS = example_launch("examples/convert/step07_seeds.py")
# The debugging guide's stuck rank, fixed (its docstring's), leaving early, and named by a monitored barrier:
# the page's commands and test_debugging.py's timings.
STUCK_RANK_FIXED = example_launch("examples/debugging/step05_stuck_rank.py")
STUCK_RANK_EXITS_EARLY = example_launch("examples/debugging/step05_stuck_rank.py", "--exit-early")
STUCK_RANK_MONITORED = example_launch("examples/debugging/step05_stuck_rank.py", "--monitored")
# The debugging guide's DataLoader through /dev/shm: its default batches, the smaller ones that fit in 64 MB, and
# the other sharing strategy. The page and the example's self-check run them as they are; test_debugging.py runs
# them again in a mount namespace whose /dev/shm is 64 MB, as a container's is.
SHARED_MEMORY = example_launch("examples/debugging/step11_shared_memory.py")
SHARED_MEMORY_SMALL_BATCHES = example_launch("examples/debugging/step11_shared_memory.py", "--batch-size", "8")
SHARED_MEMORY_FILE_SYSTEM = example_launch(
    "examples/debugging/step11_shared_memory.py", "--sharing-strategy", "file_system"
)
# torch's late-import canary, not an example: the DDP internals page runs it, test_examples.py checks it
# (and runs it again with --early).
LATE_IMPORT = "torchrun --standalone --nproc_per_node=2 tests/faulty_scripts/late_import_keeps_group.py"
