"""Every script in examples/ runs the way a reader runs a copy of it: the torchrun command in its
docstring, from a folder that holds only that file, with torch and without distdocs (but for the one
piece its page builds). It must exit 0, leave nothing running, and reach the end of its self-check.
And every example shows the same process-group setup, which the first lesson page explains: it and the
other blocks the examples repeat by design are stamped from one source, tools/example_blocks.py."""

from __future__ import annotations

import ast
import re
import sys

import pytest

from docexec.commands import COMMAND_TIMEOUT_S
from docexec.copies import ALLOWED_IN_EXAMPLES
from docexec.fences import REPO, all_examples, example_command
from docexec.rule import Expected
from support.launches import LATE_IMPORT
from tools.sync_examples import SOURCE, differing_blocks, source_blocks, stamp

EXAMPLE_SCRIPTS = all_examples()
IDS = [str(p.relative_to(REPO)) for p in EXAMPLE_SCRIPTS]
# Scripts that run as one process, with `python`: the starting point that the convert page makes
# distributed. They have no process group, so no setup section and no constants for it.
ONE_PROCESS = {p for p in EXAMPLE_SCRIPTS if example_command(p).startswith("python ")}
DISTRIBUTED = [p for p in EXAMPLE_SCRIPTS if p not in ONE_PROCESS]
DISTRIBUTED_IDS = [str(p.relative_to(REPO)) for p in DISTRIBUTED]
FIRST = REPO / "examples/data_parallel/step01_manual_allreduce.py"  # the lesson page that explains the setup
SETUP_START = "# --8<-- [start:setup]"
# torchrun's report of a rank that a signal ended: `exitcode: -9`, `exitcode  : -9 (pid: ...)`.
SIGNALLED = re.compile(r"exitcode\s*:\s*-\d+")


@pytest.mark.fast
def test_there_are_examples():
    assert EXAMPLE_SCRIPTS, "no examples found under examples/"


@pytest.mark.processes
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=IDS)
def test_example_passes_its_self_check(script, command_runs, record_property):
    command = example_command(script)
    assert str(script.relative_to(REPO)) in command, f"the docstring's command does not launch {script.name}"
    # The self-check asserts the page's claim and only then prints "self-check passed": a run that
    # skipped its checks cannot pass (docexec.rule, the rule that the GPU check applies too).
    result = command_runs.run_ok(command, expected=Expected(self_check=True))
    # Safe to paste: run as its docstring says, with no fault injected, it kills no process of its own,
    # and leaves every file it found where it ran (the reader's `checkpoints/` folder among them,
    # docexec.copies.READERS_FILES) as it was.
    assert not result.disturbed, f"{script.name} changed or removed files it did not create: {result.disturbed}"
    killed = SIGNALLED.findall(result.stderr)
    assert not killed, f"{script.name}: torchrun reports a rank ended by a signal: {killed}\n{result.describe()}"
    record_property("executed", "examples")


@pytest.mark.fast
@pytest.mark.parametrize("script", DISTRIBUTED, ids=DISTRIBUTED_IDS)
def test_example_shows_the_setup_section(script):
    text = script.read_text()
    if SETUP_START not in text:  # a framework that starts the group itself must still show that call
        assert "deepspeed.init_distributed(" in text or "torchft" in text and "Manager(" in text, (
            f"{script.name} has no setup section"
        )


@pytest.mark.fast
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=IDS)
def test_example_blocks_match_their_one_source(script):
    """The setup section, the timeout comment and the helpers the examples repeat by design are
    written once, in tools/example_blocks.py, and stamped into every copy by `make sync-examples`."""
    where = script.relative_to(REPO)
    drifted = [f"{where}: block {name} differs from {SOURCE.relative_to(REPO)}" for name in differing_blocks(script)]
    assert not drifted, "\n".join(drifted) + "\nrun make sync-examples"


@pytest.mark.fast
def test_sync_examples_replaces_the_drifted_blocks_and_no_other_line():
    """Another engineer's edit in the same file survives the stamp; a drifted block does not."""
    text = FIRST.read_text()
    drifted = text.replace("1800 s or more", "an hour").replace("exit code 2\n", "exit 2\n", 1)
    edited = drifted.replace("GLOBAL_BATCH = 64", "GLOBAL_BATCH = 32")  # outside every block
    stamped, changed = stamp(edited, source_blocks())
    assert changed == ["setup", "timeout_comment"]
    assert stamped == text.replace("GLOBAL_BATCH = 64", "GLOBAL_BATCH = 32")


@pytest.mark.fast
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=IDS)
def test_example_imports_torch_and_at_most_the_piece_its_page_builds(script):
    tree = ast.parse(script.read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    ours = {m for m in modules if m.split(".")[0] == "distdocs"}
    assert len(ours) <= 1 and ours <= {f"distdocs.training.{name}" for name in ALLOWED_IN_EXAMPLES}, ours
    if ours:
        assert "pip install -e ." in ast.get_docstring(tree), "say in the docstring how to install the piece"
    # The two frameworks whose pages teach them: DeepSpeed (launchers) and torchft (multi-node).
    frameworks = {"distdocs", "torch", "deepspeed", "torchft"}
    others = {m.split(".")[0] for m in modules} - frameworks - sys.stdlib_module_names
    assert not others, f"{script.name} needs more than torch: {others}"


def imports_distdocs(script) -> bool:
    tree = ast.parse(script.read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    return any(name.split(".")[0] == "distdocs" for name in names)


@pytest.mark.fast
def test_the_set_up_page_counts_the_examples_that_import_the_library():
    count = sum(imports_distdocs(p) for p in EXAMPLE_SCRIPTS)
    text = " ".join((REPO / "docs/start/set-up.md").read_text().split())
    said = re.search(r"(\w+) examples import one piece of this site's library", text)
    words = "zero one two three four five six seven eight nine ten".split()
    assert said and said.group(1).lower() == words[count], (
        f"{count} examples import distdocs; the set-up page says otherwise"
    )


@pytest.mark.processes
def test_plain_python_gets_a_one_line_error_with_the_torchrun_command(command_runs):
    example = "examples/data_parallel/step01_manual_allreduce.py"
    result = command_runs.run(f"python {example}")
    assert result.returncode != 0 and not result.timed_out
    assert result.stderr.strip() == (f"error: launch with torchrun: torchrun --standalone --nproc_per_node=2 {example}")


# Run in each rank, this holds rank 0 back before it runs the script: the others reach the refusal first.
RANK_0_LATE = (
    "import os, runpy, sys, time; sys.argv = ['{script}']; "
    "os.environ['RANK'] == '0' and time.sleep(6); runpy.run_path('{script}', run_name='__main__')"
)


@pytest.mark.processes
def test_wrong_world_size_gets_one_line_naming_the_right_command_however_late_rank_0_comes(command_runs):
    """The one torchrun launch of a refusal (the rest are checked in the test process): said once, by
    rank 0, which torchrun reports as exiting with 2; the script prints no traceback. Rank 0 comes 6 s
    late on purpose: the others leave at once with code 0, so none can make torchrun stop rank 0
    before it has spoken (with the old 5 s wait and exit code 2, they did)."""
    script = "examples/model_parallel/step01_split_layers.py"  # needs exactly 2 ranks
    wanted = (
        f"error: this example needs exactly 2 processes, got 3; "
        f"launch it with: torchrun --standalone --nproc_per_node=2 {script}"
    )
    late = RANK_0_LATE.format(script=script)
    command_runs.run_usage_error(f'torchrun --standalone --nproc_per_node=3 --no-python python -c "{late}"', wanted)


@pytest.mark.fast
def test_every_example_that_refuses_bad_settings_does_it_with_the_same_usage_error():
    """The function is in plain sight in each file that refuses, stamped from one source, as the setup is."""
    bodies = {}
    for script in EXAMPLE_SCRIPTS:
        source = script.read_text()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name == "usage_error":
                bodies[script.name] = ast.get_source_segment(source, node)
    assert len(bodies) >= 16, sorted(bodies)  # identical: test_example_blocks_match_their_one_source
    refusing = [p.name for p in EXAMPLE_SCRIPTS if "sys.exit(2)" in p.read_text()]
    assert set(refusing) == set(bodies), f"examples that exit 2 without usage_error: {set(refusing) - set(bodies)}"


# Run in each rank, this makes torch report what a one-GPU machine would: CUDA present, one device.
# Rank 0, which has the GPU, reaches set_device and waits there, as a real rank 0 would wait in
# init_process_group for the others.
ONE_FAKE_GPU = (
    "import runpy, sys, time, torch; sys.argv[0] = '{script}'; "
    "torch.cuda.is_available = lambda: True; torch.cuda.device_count = lambda: 1; "
    "torch.cuda.set_device = lambda device: time.sleep(60); runpy.run_path('{script}', run_name='__main__')"
)


@pytest.mark.processes
def test_more_processes_than_gpus_stops_the_rank_without_one_in_one_line(command_runs):
    """On a one-GPU node, 2 processes under nccl: without the setup's check, rank 1 dies in
    set_device with a traceback ("invalid device ordinal"). With it, rank 1 says why in one line, with
    the command that runs on the CPU, torchrun stops rank 0, and the run ends in seconds, not at the
    group's timeout. CUDA is faked in the ranks (no GPU here); the check is the setup's own lines."""
    script = "examples/data_parallel/step01_manual_allreduce.py"
    command = f'torchrun --standalone --nproc_per_node=2 --no-python python -c "{ONE_FAKE_GPU.format(script=script)}"'
    result = command_runs.run_failing(command, exit_code=1, within_s=45)  # rank 0 would wait 60 s
    wanted = (
        "error: local rank 1 has no GPU (this node has 1); launch one process per GPU, or run on the CPU: "
        f"CUDA_VISIBLE_DEVICES= torchrun --standalone --nproc_per_node=2 {script}"
    )
    assert result.stderr.splitlines().count(wanted) == 1, result.describe()
    assert "local rank 0" not in result.stderr, result.describe()  # rank 0 has its GPU
    assert 'step01_manual_allreduce.py", line' not in result.stderr, result.describe()  # no traceback from the script


@pytest.mark.processes
@pytest.mark.parametrize("early", [False, True], ids=["late-import", "early-import"])
def test_a_late_import_keeps_the_group_alive_past_destroy(command_runs, early):
    """The canary for the known torch issue on the data-parallelism page: imported after
    init_process_group, torch.distributed.nn keeps the group's gloo threads alive past
    destroy_process_group; imported first (as every example does), it leaves none. The day the
    late import leaves no threads, torch has fixed its default arguments: retire the box and the
    examples' early import."""
    flag = " --early" if early else ""
    result = command_runs.run_ok(f"{LATE_IMPORT}{flag}")
    left = "pt_gloo_runloop" in result.stdout
    assert left != early, result.describe()


def constants(script) -> tuple[str, dict[str, int]]:
    """The block that names an example's rank count and timeout: its comment and assignments with the
    numbers masked, and the numbers."""
    lines = script.read_text().splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("TIMEOUT_S = "))
    start = end
    while lines[start - 1].startswith(("#", "NPROC_PER_NODE = ")):
        start -= 1
    block = lines[start : end + 1]
    values = {line.split(" = ")[0]: int(line.split(" = ")[1]) for line in block if " = " in line}
    return "\n".join(line.split(" = ")[0] if " = " in line else line for line in block), values


@pytest.mark.fast
@pytest.mark.parametrize("script", DISTRIBUTED, ids=DISTRIBUTED_IDS)
def test_example_names_its_rank_count_and_timeout_as_the_first_lesson_does(script):
    """The setup sections are identical; what differs between examples is a named constant at the top,
    explained by the same comment, and the rank count is the docstring command's. The timeout is the
    minute or less that the comment says, and so well inside the runner's hard timeout: a hung
    collective fails in the run, with torch's own error, rather than being killed with nothing said."""
    block, values = constants(script)
    assert block == constants(FIRST)[0], f"{script.name}: its constants block differs from {FIRST.name}'s"
    nproc = re.search(r"--nproc_per_node=(\d+)", example_command(script)).group(1)
    assert values["NPROC_PER_NODE"] == int(nproc), f"{script.name}: NPROC_PER_NODE is not the launch command's {nproc}"
    limit = min(60, COMMAND_TIMEOUT_S / 2)
    assert 0 < values["TIMEOUT_S"] <= limit, f"{script.name}: TIMEOUT_S = {values['TIMEOUT_S']}, not in 1..{limit:g}"


@pytest.mark.fast
@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=IDS)
def test_example_exits_the_normal_way_with_the_cause_of_the_exit_crash_fixed(script):
    """Python's own shutdown runs (atexit handlers, thread joins, flushes): the file ends with a plain
    main() call and never calls os._exit. And torch.distributed.nn is imported at the top, before any
    process group exists, so its default arguments cannot capture the group."""
    tree = ast.parse(script.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert not [c for c in calls if c.func.attr == "_exit"], f"{script.name} calls os._exit"
    last = tree.body[-1]
    assert isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'", script.name
    assert [ast.unparse(n) for n in last.body] == ["main()"], f"{script.name} must end with a plain main()"
    top_imports = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    if script not in ONE_PROCESS:
        assert "torch.distributed.nn" in top_imports, f"{script.name} does not import torch.distributed.nn first"
