"""What the pages say about themselves: the first lesson page stays lean, the glossary and its hover
texts agree, checking notes follow one pattern, and teaching pages keep their machinery collapsed.
The routes and their times are tests/test_routes.py's."""

from __future__ import annotations

import re

import pytest

from docexec.fences import DOCS, REPO, parse_fences

pytestmark = pytest.mark.fast  # the test tier: see the testing page


def prose_words(path) -> int:
    """Words outside code fences and quizzes."""
    text = path.read_text()
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    return len(re.findall(r"[A-Za-z0-9]+", re.sub(r"<quiz>.*?</quiz>", "", text, flags=re.S)))


def test_the_first_lesson_page_stays_lean():
    """The first real page teaches the idea, the by-hand step, DDP and the setup; its internals live on
    their own page. 1,500 words of prose at most."""
    assert prose_words(DOCS / "lesson/data-parallelism.md") <= 1500


PLURALS = {"ranks": "rank", "buckets": "bucket", "shards": "shard", "collectives": "collective",
           "placements": "placement", "micro-batches": "micro-batch", "nodes": "node", "MLPs": "MLP",
           "FSDP2": "FSDP"}  # fmt: skip


def test_every_glossary_term_has_a_hover_definition_and_the_hovers_name_only_glossary_terms():
    terms = {t.lower() for t in re.findall(r"^\*\*([^*\n]+)\*\*$", (DOCS / "reference/glossary.md").read_text(), re.M)}
    hovers = re.findall(r"^\*\[([^\]]+)\]: .+$", (REPO / "includes/abbreviations.md").read_text(), re.M)
    defined = {PLURALS.get(h, h).lower() for h in hovers}
    assert defined <= terms, f"hovers for words the glossary does not define: {defined - terms}"
    assert terms - defined == {"all_reduce"}, f"glossary terms without a hover: {terms - defined - {'all_reduce'}}"


# --- one pattern for how a page is checked ---

CHECK_TITLE = re.compile(r'^(?P<indent>\s*)(?P<marker>\?\?\?\+?|!!!) (?P<kind>\w+) "(?P<title>How this[^"]*)"', re.M)
CHECK_TITLES = ("How this was measured", "How this is checked")
# What the site says about its own verification: fine inside the collapsed block, not in the lesson.
SELF_TALK = re.compile(r"make bench|the tests\b|a test (checks|runs|holds)|tests/|test suite|earlier version", re.I)
TEACHING_PAGES = [
    p
    for d in ("start", "multi-gpu", "lesson", "deep-dives", "operations", "lab")
    for p in sorted((DOCS / d).glob("*.md"))
] + sorted((DOCS / "lab").glob("*.py"))  # the lab notebooks: their Markdown cells are prose too


def notebook_markdown(path) -> str:
    """A jupytext notebook's Markdown cells, as the page shows them: the comment lines after each
    `# %% [markdown]`, up to the next cell."""
    cells = re.split(r"^# %%.*$", path.read_text(), flags=re.M)
    heads = re.findall(r"^# %%.*$", path.read_text(), flags=re.M)
    return "\n".join(
        re.sub(r"^# ?", "", body, flags=re.M) for head, body in zip(heads, cells[1:]) if "[markdown]" in head
    )


def visible_prose(path) -> str:
    """The page without its fences, collapsed blocks, quizzes and HTML comments: what a reader sees."""
    if path.suffix == ".py":
        text = notebook_markdown(path)
    else:
        text = path.read_text()
        for fence in parse_fences(path):
            text = text.replace(fence.body, "")
    text = re.sub(r"<quiz>.*?</quiz>|<!--.*?-->|<details.*?</details>", "", text, flags=re.S)
    return re.sub(r"^([ \t]*)\?\?\?.*\n(?:\1    .*\n|[ \t]*\n)*", "", text, flags=re.M)


def test_checking_notes_share_one_collapsed_pattern_at_the_end_of_their_section():
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text().splitlines()
        per_section: dict[str, int] = {}
        section = ""
        for i, line in enumerate(lines):
            if re.match(r"#{2,3} ", line):  # a section, or a subsection
                section = line
            m = CHECK_TITLE.match(line)
            if not m:
                continue
            where = f"{page.relative_to(DOCS)}:{i + 1}"
            if m["marker"] != "???" or m["kind"] != "note" or m["title"] not in CHECK_TITLES:
                problems.append(f'{where}: use ??? note "{CHECK_TITLES[0]}" or "{CHECK_TITLES[1]}"')
            per_section[section] = per_section.get(section, 0) + 1
            if per_section[section] > 1:
                problems.append(f"{where}: a second checking note under {section!r}")
            rest = [ln for ln in lines[i + 1 :] if ln.strip() and not ln.startswith(m["indent"] + " ")]
            if rest and not rest[0].startswith("#"):
                problems.append(f"{where}: not at the end of its section (next: {rest[0][:40]!r})")
    assert not problems, problems


def test_every_how_this_is_checked_note_is_short_and_names_its_test():
    """At most 5 lines of prose (a saved table it includes aside), and the test file that holds it."""
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        for m in re.finditer(r'^( *)\?\?\? note "How this is checked"\n((?:\1    .*\n|[ \t]*\n)*)', text, re.M):
            body = re.sub(r"^\s*```.*?^\s*```", "", m[2], flags=re.S | re.M)
            prose = [line for line in body.splitlines() if line.strip()]
            where = f"{page.relative_to(DOCS)}:{text[: m.start()].count(chr(10)) + 1}"
            if len(prose) > 5:
                problems.append(f"{where}: {len(prose)} lines")
            named = re.findall(r"`(tests/test_\w+\.py)", m[2])
            if not named or not all((REPO / n).is_file() for n in named):
                problems.append(f"{where}: names no test file that exists ({named})")
    assert not problems, problems


# A sentence about the machines this site is tested or measured on: a reader's machine is not one of them.
OWN_MACHINES = re.compile(
    r"this site's [\w-]* ?(?:test )?(?:machines?|CPUs?|cores)|test machines?|\b(?:\d+|two)[- ]cores?\b", re.I
)


def test_no_visible_sentence_on_a_teaching_page_names_this_sites_machines():
    found = {
        str(page.relative_to(DOCS)): [m[0] for m in OWN_MACHINES.finditer(visible_prose(page))]
        for page in TEACHING_PAGES
    }
    assert not {page: hits for page, hits in found.items() if hits}
    assert OWN_MACHINES.search("Eight ranks on this site's 2-core test machines take about 16 s")
    assert OWN_MACHINES.search("on one machine with two cores")


def test_teaching_pages_keep_their_own_checking_inside_the_collapsed_note():
    talk = {
        str(page.relative_to(DOCS)): [m.string[max(0, m.start() - 40) : m.end() + 20] for m in found]
        for page in TEACHING_PAGES
        if (found := list(SELF_TALK.finditer(visible_prose(page))))
    }
    assert not talk, f"the site talking about its own tests outside a collapsed note: {talk}"


def test_the_testing_page_names_every_module_an_example_may_import():
    from docexec.copies import ALLOWED_IN_EXAMPLES

    numbers = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    text = " ".join((DOCS / "appendix/testing.md").read_text().split())
    sentence = re.search(r"holds only `distdocs.training`, the (\w+) modules an example may import \(([^)]*)\)", text)
    assert sentence, "docs/appendix/testing.md no longer says which distdocs modules an example may import"
    assert sentence.group(1) == numbers[len(ALLOWED_IN_EXAMPLES)]
    assert set(re.findall(r"`(\w+)`", sentence.group(2))) == set(ALLOWED_IN_EXAMPLES)


def test_one_word_for_one_thing_sync_bound_with_its_synonym_only_in_the_glossary():
    """The site says "sync-bound"; "coordination-bound", used elsewhere in the literature, appears only
    as the glossary's synonym, so a reader never wonders whether they are two things."""
    pages = sorted(DOCS.rglob("*.md")) + sorted((DOCS / "lab").glob("*.py")) + [REPO / "includes/abbreviations.md"]
    using = [str(p.relative_to(REPO)) for p in pages if "coordination-bound" in p.read_text().lower()]
    assert using == ["docs/reference/glossary.md"], using


def test_the_testing_pages_table_names_every_kind_of_fence_there_is():
    """docexec.fences.KINDS is the one list; the page's table shows it to a reader."""
    from docexec.fences import KINDS

    table = (DOCS / "appendix/testing.md").read_text()
    table = table[table.index("| Block (its kind") : table.index("Commands in a **GPU** tab")]
    named = set(re.findall(r"\(`([a-z ]+)`(?:, `([a-z ]+)`)?\)", table))
    assert {k for pair in named for k in pair if k} == set(KINDS), named


def test_the_multi_node_page_states_the_preemption_examples_own_timeout():
    import ast

    tree = ast.parse((REPO / "examples/fault_tolerance/step01_resume_after_kill.py").read_text())
    assigned = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)]
    value = {n.targets[0].id: ast.literal_eval(n.value) for n in assigned if n.targets[0].id.endswith("_S")}
    page = " ".join((DOCS / "operations/multi-node.md").read_text().split())
    assert f"`TIMEOUT_S` is {value['TIMEOUT_S']} s, under `KillWait`" in page


def test_the_production_case_takes_its_step_time_from_nvidia_and_its_layout_from_us():
    """NVIDIA publishes 367 images/s for one V100 in FP32 at 112 a GPU, on a DGX-1: the step time and
    nothing about nodes or Ethernet. The lab, the scale model's one full account, says the 1 Gbit/s,
    one-GPU-a-node layout is ours."""
    from distdocs.bench.emulated import RESNET50

    assert round(RESNET50["step_s"] * 1000) == 305 and RESNET50["step_s"] == 112 / 367
    for page in ("lab/simulate-data-parallel-sync.py",):
        text = " ".join((DOCS / page).read_text().replace("\n# ", "\n").split())
        assert "305 ms" in text and "367 images/s" in text, page
        assert re.search(r"layout is ours|are our layout", text), page


def test_every_block_never_run_is_on_the_list_the_home_page_points_to():
    """The home page says the code is run, with exceptions; "What is not run" on the testing page must
    name the page of every block that is not executed, so that the claim stays exact."""
    import os

    from docexec.fences import classify

    testing = (DOCS / "appendix/testing.md").read_text()
    section = testing[testing.index("## What is not run") : testing.index("## Lint")]
    for page in sorted(DOCS.rglob("*.md")):
        if any(f.kind == "not executed" for f in classify(page)):
            link = os.path.relpath(page, DOCS / "appendix")
            assert f"]({link}" in section, f"{page.relative_to(REPO)} is not named in What is not run"
    assert "](appendix/testing.md#what-is-not-run)" in (DOCS / "index.md").read_text()


def test_in_production_says_a_pipelines_stage_reduces_its_gradients_in_its_last_backward_only():
    """The page says DP under PP overlaps only the last micro-batch's backward, because torch's
    pipelining runs the others under DDP's no_sync. Held to the installed torch's source."""
    import inspect

    from torch.distributed.pipelining.stage import _PipelineStageBase

    source = inspect.getsource(_PipelineStageBase.backward_maybe_with_nosync)
    assert "if last_backward:" in source and "with self.submod.no_sync():" in source
    page = " ".join((DOCS / "operations/in-production.md").read_text().split())
    assert "only in its last micro-batch's backward" in page and "`no_sync`" in page


def test_set_ups_installs_name_extras_that_bring_what_their_routes_import():
    """Set up gives each route one install command, `pip install -e ".[extras]"`. Each extra exists in
    pyproject.toml, with no torch pin there (a GPU reader keeps their CUDA build), and `make` installs
    the same packages, pinned in requirements.lock within the extra's range, all but JupyterLab, which
    only opens the lab. What the lab and the DeepSpeed example import comes from the core or the extra
    Set up installs for them."""
    import ast
    import sys

    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert not any(Requirement(r).name == "torch" for rs in extras.values() for r in rs)
    lock = dict(ln.split("==") for ln in (REPO / "requirements.lock").read_text().splitlines() if "==" in ln)
    lock = {name.lower().replace("_", "-"): version for name, version in lock.items()}
    named = re.findall(r'^pip install -e "\.\[([a-z,-]+)\]"', (DOCS / "start/set-up.md").read_text(), re.M)
    assert named, 'Set up shows no `pip install -e ".[...]"`'
    installed = {}
    for extra in (e for group in named for e in group.split(",")):
        assert extra in extras, f"Set up installs .[{extra}], which pyproject.toml does not define"
        for req in map(Requirement, extras[extra]):
            installed[req.name] = extra
            if req.name == "jupyterlab":
                continue
            assert req.name in lock, f".[{extra}]: {req.name} is not in requirements.lock"
            assert req.specifier.contains(lock[req.name]), f".[{extra}]: the lock's {req.name} is outside {req}"

    core = {Requirement(r).name for r in project["dependencies"]} | {"distdocs"}
    brought_by = {"IPython": "jupyterlab"}  # the lab shows its figure through IPython only inside Jupyter
    for source, extra in [
        ("docs/lab/simulate-data-parallel-sync.py", "lab"),
        ("src/distdocs/figures.py", "lab"),  # which draws the lab's chart
        ("examples/launchers/step02_deepspeed_zero.py", "deepspeed"),
    ]:
        tree = ast.parse((REPO / source).read_text())
        modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        for module in modules - set(sys.stdlib_module_names) - core:
            assert installed.get(brought_by.get(module, module).lower()) == extra, f"{source} imports {module}"


def test_every_paragraph_that_promises_a_requeue_on_preemption_names_preempt_mode():
    """`--requeue` brings a preempted job back only where the cluster's PreemptMode is REQUEUE
    (https://slurm.schedmd.com/preempt.html); with CANCEL the job is cancelled. Any paragraph that
    says `--requeue` covers a preemption says so."""
    missing = []
    for page in sorted(DOCS.rglob("*.md")):
        for paragraph in re.split(r"\n\s*\n", page.read_text()):
            flat = " ".join(paragraph.split())
            if "--requeue" in flat and "preempt" in flat.lower() and "PreemptMode" not in flat:
                missing.append(f"{page.relative_to(REPO)}: {flat[:80]}")
    assert not missing, missing
