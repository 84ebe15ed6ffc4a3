"""The sentences that say what a call does, each held by a test: declared where the test is written,
with `@pytest.mark.holds(PAGE, SENTENCE)`, and read from the test modules' marks (never from their
source text). The testing appendix lists them (includes/held-sentences.md, written from these
declarations), and tests/test_held_sentences.py fails when a sentence is no longer on its page as
written, or when the list and the declarations differ."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from docexec.fences import DOCS, REPO, parse_fences

TESTS = REPO / "tests"
LIST = REPO / "includes" / "held-sentences.md"


@dataclass(frozen=True, order=True)
class Held:
    page: str  # docs/section/page.md
    sentence: str  # as the page writes it, line breaks aside
    test: str  # tests/test_x.py::test_name


def declarations(tests: Path = TESTS) -> list[Held]:
    """Every `holds` mark on a test function of tests/test_*.py, in page order then as declared. The
    modules are imported as pytest imports them (tests/ is on sys.path), so a collected run reads the
    modules it already has."""
    found = []
    for path in sorted(tests.glob("test_*.py")):
        module = importlib.import_module(path.stem)
        for name, function in vars(module).items():
            if not name.startswith("test_") or not callable(function):
                continue
            for mark in getattr(function, "pytestmark", []):
                if mark.name == "holds":
                    page, sentence = mark.args
                    found.append(Held(page, sentence, f"tests/{path.name}::{name}"))
    pages = {p: i for i, p in enumerate(sorted({h.page for h in found}))}
    return sorted(found, key=lambda h: pages[h.page])


def prose(page: Path) -> str:
    """The page's text outside its code fences, whitespace collapsed, list markers and quote marks kept."""
    text = page.read_text()
    for fence in parse_fences(page):
        text = text.replace(fence.body, "")
    return " ".join(text.split())


def missing_from_pages(held: list[Held]) -> list[str]:
    problems = []
    for h in held:
        path = REPO / h.page
        if not path.is_file() or not str(path).startswith(str(DOCS)):
            problems.append(f"{h.test}: no page {h.page}")
        elif " ".join(h.sentence.split()) not in prose(path):
            problems.append(f"{h.test}: {h.page} no longer says: {h.sentence}")
    return problems


def listing(held: list[Held]) -> str:
    """The appendix's list: a table a page, each sentence with the test that holds it."""
    lines = ["<!-- Written by `pytest tests/test_held_sentences.py --update-outputs` from the tests' holds marks. -->"]
    for page in dict.fromkeys(h.page for h in held):
        title = re.search(r"^# (.+)$", (REPO / page).read_text(), re.M)
        lines += ["", f"**[{title.group(1) if title else page}](../{page.removeprefix('docs/')})**", ""]
        lines += ["| The sentence | The test that holds it |", "|---|---|"]
        for h in (h for h in held if h.page == page):
            sentence = " ".join(h.sentence.split()).replace("|", "\\|")
            lines.append(f"| {sentence} | `{h.test}` |")
    return "\n".join(lines) + "\n"
