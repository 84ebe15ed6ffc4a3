"""Every fence in docs/ is executed, included from a tested example, or explicitly excused; every
command shown runs exactly as written; every output shown is what the command prints now."""

from __future__ import annotations

import ast
import dataclasses
import os
import re

import pytest
import torch

from docexec.claims import claimed_fences
from docexec.commands import COMMAND_TIMEOUT_S
from docexec.fences import (
    DOCS,
    ENV_PREFIX,
    EXAMPLES,
    REPO,
    all_examples,
    all_fences,
    classify,
    example_command,
    resolve_include,
)
from docexec.outputs import excerpt_missing, output_mismatch
from docexec.shared_runs import parse_launch
from support import launches

FENCES = all_fences()
COMMANDS = [f for f in FENCES if f.kind == "command"]
OUTPUTS = [f for f in FENCES if f.kind == "output"]
EXCERPTS = [f for f in FENCES if f.kind == "excerpt"]
NOT_EXECUTED_LIMIT = 5  # a handful at most: `make` itself, installs into the reader's environment
INLINE_COMMAND = re.compile(r"`((?:torchrun|python|distdocs) [^`]*)`")


def gpu_skip(fence):
    if fence.gpu and not torch.cuda.is_available():
        pytest.skip("GPU tab: needs CUDA")
    if "root" in fence.options and os.geteuid() != 0:  # a fence marked `root` builds networks (distdocs.lab.links)
        pytest.skip("needs root: it builds network namespaces")


@pytest.mark.fast
def test_every_fence_is_executed_or_excused(record_property):
    unverified = [f.where for f in FENCES if f.kind == "unverified"]
    assert not unverified, (
        "these fences are not run by any test; make them an inline python block, an include of an "
        "example, a torchrun/python/distdocs command, an Output block after a command, or put "
        f"<!-- not executed: REASON --> above them: {unverified}"
    )
    unexcused_notest = [f.where for f in FENCES if "notest" in f.options and f.kind not in ("include", "not executed")]
    assert not unexcused_notest, f"`notest` without an include or a reason: {unexcused_notest}"
    excused = [f for f in FENCES if f.kind == "not executed"]  # each has its reason: test_markdown_fences.py
    assert len(excused) <= NOT_EXECUTED_LIMIT, [f"{f.where}: {f.reason}" for f in excused]
    for _ in excused:
        record_property("executed", "fences not executed (each with its reason)")


@pytest.mark.fast
def test_includes_name_existing_files_and_sections():
    problems = []
    for fence in (f for f in FENCES if f.kind == "include"):
        for target in fence.includes:
            path, section = resolve_include(target)
            if path is None:
                problems.append(f"{fence.where}: no file {target!r} under examples/ or src/")
            elif section and f"--8<-- [start:{section}]" not in path.read_text():
                problems.append(f"{fence.where}: {path.relative_to(REPO)} has no section {section!r}")
            elif section and f"--8<-- [end:{section}]" not in path.read_text():
                problems.append(f"{fence.where}: section {section!r} is never ended")
    assert not problems, problems


@pytest.mark.fast
def test_every_example_is_on_a_page():
    pages = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    missing = [str(p.relative_to(REPO)) for p in all_examples() if str(p.relative_to(EXAMPLES)) not in pages]
    assert not missing, f"examples shown on no page: {missing}"


@pytest.mark.fast
def test_inline_commands_in_prose_are_run_somewhere():
    """A `torchrun ...` in running text must be a command that a test runs, or the start of one
    (naming a tool, as in `distdocs bench allreduce`)."""
    run = {f.command for f in COMMANDS} | {example_command(p) for p in all_examples()}
    stray = []
    for page in DOCS.rglob("*.md"):
        text = page.read_text()
        for fence in (f for f in FENCES if f.path == page):
            text = text.replace(fence.body, "")
        stray += [
            f"{page.relative_to(REPO)}: {c}"
            for c in INLINE_COMMAND.findall(text)
            if not any(r.startswith(c) for r in run)
        ]
    assert not stray, f"commands shown in prose that no test runs: {stray}"


def run_as_the_page_says(fence, command_runs, command: str):
    """Run a command fence's command, as a success or, where the fence says so, as a failure."""
    busy = int(fence.attrs["busy_port"]) if "busy_port" in fence.attrs else None
    fault = fence.attrs.get("fault")  # injected by the test; the page says how to cause it by hand
    if "exit" in fence.attrs:
        return command_runs.run_failing(
            command, int(fence.attrs["exit"]), float(fence.attrs["within"]), busy, fault=fault
        )
    return command_runs.run_ok(command, gpu=fence.gpu, busy_port=busy, fault=fault)


@pytest.mark.processes
@pytest.mark.parametrize("fence", COMMANDS, ids=[f.where for f in COMMANDS])
def test_command_runs_as_written(fence, command_runs, record_property):
    gpu_skip(fence)
    run_as_the_page_says(fence, command_runs, fence.command)
    record_property("executed", "shell commands")


@pytest.mark.fast
def test_failing_commands_state_their_exit_code_and_bound():
    for fence in COMMANDS:
        if {"exit", "within"} & fence.attrs.keys():
            assert {"exit", "within"} <= fence.attrs.keys(), f"{fence.where}: a failing command needs exit and within"
            assert float(fence.attrs["within"]) < COMMAND_TIMEOUT_S / 2, f"{fence.where}: bound far below the test's"


@pytest.mark.processes
@pytest.mark.parametrize("fence", EXCERPTS, ids=[f.where for f in EXCERPTS])
def test_excerpt_appears_in_a_fresh_run(fence, command_runs, record_property):
    gpu_skip(fence)
    result = run_as_the_page_says(fence, command_runs, fence.attrs["after"])
    problem = excerpt_missing(fence.body, result.stdout + result.stderr)
    assert problem is None, f"{fence.where}: {problem}\n{result.describe()}"
    record_property("executed", "output blocks checked")


@pytest.mark.processes
@pytest.mark.parametrize("fence", OUTPUTS, ids=[f.where for f in OUTPUTS])
def test_output_block_matches_a_fresh_run(fence, command_runs, request, record_property):
    gpu_skip(fence)
    actual = run_as_the_page_says(fence, command_runs, fence.attrs["after"]).stdout  # the command's own run
    if request.config.getoption("--update-outputs"):
        rewrite_output_block(fence, actual)
        return
    problem = output_mismatch(fence.body, actual)
    assert problem is None, f"{fence.where}: {problem}\n--- the command printed ---\n{actual}"
    record_property("executed", "output blocks checked")


def rewrite_output_block(fence, actual: str) -> None:
    """Replace the block's body with `actual`. Earlier rewrites may have moved it: find it afresh as
    the same-numbered Output block of its page."""
    ordinal = [f for f in OUTPUTS if f.path == fence.path].index(fence)
    fresh = [f for f in classify(fence.path) if f.kind == "output"][ordinal]
    lines = fence.path.read_text().splitlines(keepends=True)
    opening = lines[fresh.line - 1]
    indent = opening[: len(opening) - len(opening.lstrip())]
    old_length = len(fresh.body.strip("\n").splitlines()) if fresh.body.strip() else 0
    body = [indent + ln + "\n" if ln else "\n" for ln in actual.strip("\n").splitlines()]
    lines[fresh.line : fresh.line + old_length] = body
    fence.path.write_text("".join(lines))


@pytest.mark.fast
def test_reference_page_documents_every_subcommand():
    """docs/reference/cli.md shows the --help of every `distdocs` subcommand and benchmark."""
    import argparse

    from distdocs import cli

    text = (DOCS / "reference/cli.md").read_text()
    commands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [f"distdocs {name} --help" for name in commands.choices if f"distdocs {name} --help" not in text]
    missing += [f"distdocs bench {n} --help" for n in cli.BENCHMARKS if f"distdocs bench {n} --help" not in text]
    assert not missing, f"subcommands without a section on the reference page: {missing}"


QUIZ = re.compile(r"<quiz>\n(.*?)</quiz>", re.S)


# Every teaching page; the set-up page teaches nothing to test yourself on.
QUIZ_PAGES = sorted(
    page
    for section in ("start", "multi-gpu", "lesson", "deep-dives", "operations")
    for page in (DOCS / section).glob("*.md")
    if page != DOCS / "start/set-up.md"
)


@pytest.mark.fast
@pytest.mark.parametrize("page", QUIZ_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_teaching_page_ends_with_a_short_quiz_whose_answers_explain_themselves(page):
    text = page.read_text()
    quizzes = QUIZ.findall(text)
    assert 2 <= len(quizzes) <= 4, f"{page.name}: {len(quizzes)} questions, not 2 to 4"
    assert "\n## " not in text[text.index("## Check yourself") + 3 :], f"{page.name}: the quiz is not at the end"
    for quiz in quizzes:
        answers = re.findall(r"^- \[([ x])\] ", quiz, re.M)
        assert answers.count("x") == 1 and len(answers) >= 3, quiz[:80]
        assert len(re.findall(r"^> ", quiz, re.M)) == len(answers), f"an answer without its explanation: {quiz[:80]}"
        assert re.search(r"\]\([^)]*#[\w-]+\)|\]\([\w/-]+\.md\)", quiz), f"no link to the section it tests: {quiz[:80]}"
        assert "all of the above" not in quiz.lower()


EXERCISE = re.compile(r"^### Exercise \d+: [^\n]+\n(.*?)(?=^### |^## )", re.S | re.M)
SOLUTION = '<details class="success" markdown>\n<summary>Solution</summary>'


@pytest.mark.fast
@pytest.mark.parametrize("page", sorted((DOCS / "lesson").glob("*.md")), ids=lambda p: str(p.relative_to(REPO)))
def test_every_lesson_page_has_one_or_two_exercises_each_with_a_collapsed_solution_that_runs(page):
    """A solution sits in a <details> block whose fences are not indented, so that both
    pytest-markdown-docs and the command runner see them; its code is an inline block they run, a
    command the doc tests run, or an examples/**/exercise*.py file, which test_examples runs."""
    text = page.read_text()
    assert "## Exercises" in text and text.index("## Exercises") < text.index("## Check yourself"), page.name
    exercises = EXERCISE.findall(text[text.index("## Exercises") : text.index("## Check yourself")] + "## ")
    assert 1 <= len(exercises) <= 2, f"{page.name}: {len(exercises)} exercises"
    for body in exercises:
        assert body.count(SOLUTION) == 1 and body.rstrip().endswith("</details>"), body[:80]
        solution = body[body.index(SOLUTION) :]
        runs = re.search(r"^```(python|bash)$", solution, re.M) or re.search(r'"[\w/]+/exercise\d+_\w+\.py:', solution)
        assert runs, f"{page.name}: a solution with no code that a test runs: {body[:80]}"


@pytest.mark.fast
def test_every_exercise_solution_file_is_shown_on_its_page():
    shown = "".join(p.read_text() for d in ("lesson", "deep-dives") for p in (DOCS / d).glob("*.md"))
    files = sorted((REPO / "examples").rglob("exercise*.py"))
    assert files and all(f'"{f.relative_to(REPO / "examples")}:' in shown for f in files), files


@pytest.mark.fast
def test_no_command_fence_is_checked_by_its_exit_code_alone():
    """Every command a page shows is followed by its Output or Excerpt, or runs an example (whose run
    must print "self-check passed", by docexec.rule), or a named test asserts on what it prints: one
    that finds it with page_command(). A GPU tab's command runs an example too, under the GPU check."""
    claimed = claimed_fences(fences=FENCES)
    examples = {example_command(p) for p in all_examples()}
    shown = ("output", "excerpt", "node excerpt", "slurm excerpt")
    checked_after = {(f.path, f.attrs.get("after")) for f in FENCES if f.kind in shown}
    # Node commands run together, as the machines they stand for: an excerpt after the last of a run
    # of them checks what that run printed.
    for f, nxt in zip(FENCES, FENCES[1:]):
        if f.kind == nxt.kind == "node command" and f.path == nxt.path and (f.path, nxt.command) in checked_after:
            checked_after.add((f.path, f.command))
    bare = []
    for fence in (f for f in FENCES if f.kind in ("command", "node command", "slurm command")):
        runs_an_example = fence.command in examples or (
            fence.gpu
            and any(re.sub(r"--nproc_per_node=\d+", "--nproc_per_node=gpu", e) == fence.command for e in examples)
        )
        by_a_test = any(text in fence.command for text in claimed.get(str(fence.path.relative_to(REPO)), ()))
        if (fence.path, fence.command) not in checked_after and not runs_an_example and not by_a_test:
            bare.append(f"{fence.where}: {fence.command[:80]}")
    assert not bare, "command fences that only their exit code checks:\n" + "\n".join(bare)


# --- every launch the suite makes, and the doubles among them ---

LAUNCH_PREFIXES = ("torchrun ", "python ")
IN_PROCESS = {"check_refusal", "refusal_problems", "refuse_in_process"}  # calls that run no launch
PLAIN = (None, None, False)  # what a launch declares: no fault, no busy port, no GPU tab


def resolved(node: ast.AST, names: dict[str, str]) -> str | None:
    """The text of a string expression, or None where it depends on what a scan cannot know: a
    constant, an f-string or a `+` of them, a name in `names`, a call of example_launch."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.FormattedValue):
        return resolved(node.value, names) if node.conversion == -1 and node.format_spec is None else None
    if isinstance(node, ast.JoinedStr | ast.BinOp):
        parts = node.values if isinstance(node, ast.JoinedStr) else [node.left, node.right]
        texts = [resolved(p, names) for p in parts]
        ok = isinstance(node, ast.JoinedStr) or isinstance(node.op, ast.Add)
        return "".join(texts) if ok and None not in texts else None
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "example_launch":
        args = [resolved(a, names) for a in node.args]
        return launches.example_launch(*args) if None not in args and not node.keywords else None
    return None


def launches_in_test_file(path) -> list[tuple[str, str]]:
    """The launch commands that a test file writes, as (file:line, command): string constants and
    f-strings that start with torchrun or python (after any settings). Names resolve where a
    module-level assignment or `from support.launches import` gives them; a command with a part that
    cannot resolve (a test's parameter, a temporary folder, a name set inside a function) is left
    out. A string passed to check_refusal runs in the test process, and is no launch."""
    tree = ast.parse(path.read_text())
    where = str(path.relative_to(REPO))
    shared = {n: v for n, v in vars(launches).items() if n.isupper() and isinstance(v, str)}
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "support.launches"]
    names = {a.asname or a.name: shared[a.name] for n in imports for a in n.names if a.name in shared}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if (text := resolved(node.value, names)) is not None:
                names[node.targets[0].id] = text
    skip = set()  # the parts of f-strings, and what is passed to a call that runs in the test process
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(map(id, node.values))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in IN_PROCESS:
            skip.update(id(n) for a in node.args for n in ast.walk(a))
    found = []
    for node in ast.walk(tree):
        if id(node) not in skip and isinstance(node, ast.Constant | ast.JoinedStr | ast.Call):
            text = resolved(node, names)
            if text and ENV_PREFIX.sub("", text).startswith(LAUNCH_PREFIXES):
                found.append((f"{where}:{node.lineno}", text))
    return found


def every_launch() -> list[tuple[str, str, tuple]]:
    """Every launch the suite makes, as (where, command, what it declares: its fault, busy port and
    GPU tab): the pages' command fences, the examples' docstring commands, the shared launches of
    tests/support/launches.py, and the commands written in tests/test_*.py (launches_in_test_file;
    what a test passes beside them, a fault say, is not read: they count as declaring nothing)."""
    found = [(f.where, f.command, (f.attrs.get("fault"), f.attrs.get("busy_port"), f.gpu)) for f in COMMANDS]
    found += [(f"{p.relative_to(REPO)} (docstring)", example_command(p), PLAIN) for p in all_examples()]
    shared = {n: v for n, v in vars(launches).items() if n.isupper() and isinstance(v, str)}
    found += [(f"tests/support/launches.py: {n}", v, PLAIN) for n, v in shared.items()]
    for path in sorted((REPO / "tests").glob("test_*.py")):
        found += [(where, command, PLAIN) for where, command in launches_in_test_file(path)]
    return found


def launch_doubles(found: list[tuple[str, str, tuple]]) -> list[str]:
    """The groups of single launches of one script with the same arguments and rank count, declared
    alike, whose launch_keys differ in more than an environment setting that a page shows on purpose
    (with and without TORCH_DISTRIBUTED_DEBUG=DETAIL, say): each such group runs one example twice."""
    groups: dict[tuple, list] = {}
    for where, command, declared in found:
        if launch := parse_launch(command):
            groups.setdefault((launch.script or (launch.launcher,), launch.args, launch.ranks), []).append(
                (where, launch, declared)
            )
    doubles = []
    for members in groups.values():
        shown = {s.split("=")[0] for where, launch, _ in members if where.startswith("docs/") for s in launch.settings}
        keys: dict[tuple, set[str]] = {}
        for _, launch, declared in members:
            unshown = tuple(s for s in launch.settings if s.split("=")[0] not in shown)
            keys.setdefault(declared, set()).add(dataclasses.replace(launch, settings=unshown).key)
        if any(len(k) > 1 for k in keys.values()):
            lines = [f"  {where}{'' if d == PLAIN else f' {d}'}: {launch.key}" for where, launch, d in members]
            doubles.append("\n".join(lines))
    return doubles


@pytest.mark.fast
def test_no_example_runs_twice_with_the_same_arguments():
    """Runs are shared by launch_key: two launches of one script with the same arguments and rank
    count that spell it differently (a flag more, a setting more) run it twice. Name such a launch once
    in tests/support/launches.py and import it, or make the difference a declared one: a fault, a busy
    port, a GPU tab, or an environment setting that a page shows. The scan of the test files skips a
    command with a part it cannot resolve: a test's parameter, a temporary folder, a name set inside
    a function."""
    doubles = launch_doubles(every_launch())
    assert not doubles, "launches that run one example twice:\n" + "\n\n".join(doubles)


@pytest.mark.fast
def test_the_double_check_finds_a_flag_added_to_one_copy():
    """launch_doubles itself: a launch typed again with one launcher option more is a double, unless it
    declares a fault; typed again as it is, or with a setting that the page shows, it is not."""
    command = "torchrun --standalone --nproc_per_node=2 examples/x/step01_y.py --a 1"
    more = command.replace("=2", "=2 --max-restarts=1")
    same = [("docs/x.md:1", f"DEBUG=1 {command}", PLAIN), ("tests/test_x.py:1", command, PLAIN)]
    assert launch_doubles(same) == []
    assert launch_doubles([*same, ("tests/test_y.py:1", more, ("kill-rank=1", None, False))]) == []
    (double,) = launch_doubles([*same, ("tests/test_y.py:1", more, PLAIN)])
    assert "tests/test_y.py:1: torchrun --max-restarts=1 --nproc-per-node=2" in double, double
