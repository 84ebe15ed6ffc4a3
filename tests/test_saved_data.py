"""The one list of saved data (measurements/saved-data.yml) is complete and true: every file under
measurements/ and docs/assets/ has exactly one entry, every entry's files exist, `make bench` runs from
it, each command writes the files its entry names, and the pages and tests that read a file are the
ones its entry lists."""

from __future__ import annotations

import re

import pytest

from docexec.fences import DOCS, REPO, all_examples
from tools.saved_data import FOLDERS, LIST, artefacts

pytestmark = pytest.mark.fast  # the test tier: see the testing page

ARTEFACTS = artefacts()
GPU = "gpu-" + "check"  # the target whose file only a CUDA machine writes (spelt so as not to read it)
TARGETS = {"bench", "audit", "exit-soak", "preempt-soak", "test-torch", GPU, "by hand"}  # make targets, or by hand
HOOKS = REPO / "hooks"


def readers(artefact, candidates) -> set[str]:
    """The files among `candidates` that name one of the artefact's files, or the artefact itself as
    a quoted name (as test_bench.py's `saved(NAME)` does)."""
    names = [re.escape(f.split("/")[-1]) for f in artefact.files] + [f'"{re.escape(artefact.name)}"']
    pattern = re.compile(r"(?<![\w.-])(?:" + "|".join(names) + ")")  # whole names: not ddp-cpu in profile-ddp-cpu
    return {str(p.relative_to(REPO)) for p in candidates if pattern.search(p.read_text())}


def test_every_saved_file_has_one_entry_and_every_entry_its_files():
    listed = [f for a in ARTEFACTS for f in a.files]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    on_disk = {str(p.relative_to(REPO)) for folder in FOLDERS for p in (REPO / folder).rglob("*") if p.is_file()}
    on_disk.discard(str(LIST.relative_to(REPO)))
    assert sorted(on_disk - set(listed)) == [], f"files without an entry in {LIST.name}"
    not_yet = {f for a in ARTEFACTS if a.target == GPU for f in a.files}  # no GPU has run it yet
    assert sorted(set(listed) - on_disk - not_yet) == [], "entries whose files are missing"
    assert len({a.name for a in ARTEFACTS}) == len(ARTEFACTS)


@pytest.mark.parametrize("artefact", ARTEFACTS, ids=[a.name for a in ARTEFACTS])
def test_each_entry_says_how_its_files_are_made(artefact):
    assert artefact.target in TARGETS, artefact.target
    if artefact.target == "by hand":
        assert artefact.note and not artefact.commands
        return
    assert artefact.commands
    made = "\n".join(artefact.commands)
    # Where a command writes: a --save PREFIX (PREFIX.json and .txt), a --figure or --table file, a
    # redirection, or a command's last argument (a figure command's output, cp's target).
    prefixes = re.findall(r"--save (\S+)", made)
    outputs = set(re.findall(r"(?:--figure|--table|>)\s*(\S+)", made))
    segments = [s.split() for line in artefact.commands for s in re.split(r"&&|;", line)]
    outputs |= {words[-1] for words in segments if words}
    for file in artefact.files:
        written = file in outputs or any(file.startswith(p + ".") for p in prefixes)
        assert written or artefact.target == GPU, f"{artefact.name}: no command writes {file}"


@pytest.mark.parametrize("artefact", ARTEFACTS, ids=[a.name for a in ARTEFACTS])
def test_the_pages_and_tests_that_read_a_file_are_the_ones_its_entry_lists(artefact):
    pages = [p for p in DOCS.rglob("*") if p.suffix in (".md", ".py")] + list(HOOKS.glob("*.py"))
    assert readers(artefact, pages) == set(artefact.pages), f"{artefact.name}: pages"
    tests = list((REPO / "tests").glob("*.py"))
    assert readers(artefact, tests) == set(artefact.tests), f"{artefact.name}: tests"


def test_make_bench_runs_from_the_list():
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^bench: .*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and recipe.group(1).strip() == "$(BIN)/python -m tools.saved_data run bench", recipe
    assert "--save measurements/" not in makefile.replace(recipe.group(0), ""), "a measurement outside the list"


def test_the_readme_states_the_suites_time_from_the_saved_profile():
    wall = re.search(r"^# wall (\d+) s", (REPO / "measurements/test-durations-cpu.txt").read_text(), re.M)
    said = re.search(r"it takes about (\d+) minutes", " ".join((REPO / "README.md").read_text().split()))
    assert wall and said and int(said.group(1)) == (int(wall.group(1)) + 30) // 60, "README: update the suite's time"


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split("."))


def test_the_torch_range_claims_only_releases_under_which_every_example_passed():
    """`make test-torch VERSION=...` reports on every example under that release. pyproject.toml's
    lower bound is a release whose report passed, and every report at or above it covers every example
    and passed; a report below it shows why the bound is there, and may predate later examples."""
    reports = {
        p.name[len("torch-") : -len("-cpu.txt")]: p.read_text() for p in (REPO / "measurements").glob("torch-*-cpu.txt")
    }
    examples = {str(p.relative_to(REPO)) for p in all_examples()}
    bound = re.search(r'"torch>=([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    passed = set()
    for version, text in reports.items():
        lines = {line.split(": ")[0]: line for line in text.splitlines()[1:]}
        if release(version) >= release(bound):
            assert set(lines) == examples, f"torch {version}: the report does not cover every example"
        if all(": passed in " in line or ": not run: it needs " in line for line in lines.values()):
            passed.add(version)
    assert any(release(v)[: len(release(bound))] == release(bound) for v in passed), f"no passing report for {bound}"
    assert all(v in passed for v in reports if release(v) >= release(bound)), sorted(reports.keys() - passed)
