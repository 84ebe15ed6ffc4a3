"""A MkDocs hook: the testing appendix's table of which tests check which page, read from the tests.

Every page's code blocks, commands and outputs are run by tests/test_docs.py and the examples it
includes by tests/test_examples.py; the table names, page by page, the other test files that hold
what the page says (its numbers, its figures, its claims about a run). A test file checks a page when
its text names the page's file (`docs/lesson/collectives.md`, `lesson/collectives.md`) or its built
address (`lesson/collectives/`). The
appendix's `<!-- checks by page -->` line becomes the table, in the navigation's order.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from routes import nav_titles

CHECKS_MARKER = "<!-- checks by page -->"
REPO = Path(__file__).resolve().parent.parent
EVERY_PAGE = {"test_docs.py", "test_examples.py", "test_routes.py", "test_pages.py", "test_quiz_keys.py"}


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return re.split(r"(?<=[.:])\s", " ".join(doc.split()), maxsplit=1)[0]


def checks_by_page(nav) -> dict[str, list[str]]:
    """Each page of the navigation and the test files, beyond those that run every page, that name it."""
    tests = {p.name: p.read_text() for p in sorted((REPO / "tests").glob("test_*.py")) if p.name not in EVERY_PAGE}
    found = {}
    for page in nav_titles(nav):
        named = re.compile(re.escape(page.rsplit(".", 1)[0]) + r"(?:\.md|\.py|/)")  # the file, or its built URL
        found[page] = [name for name, text in tests.items() if named.search(text)]
    return found


def checks_table(nav) -> str:
    titles = nav_titles(nav)
    rows = ["| Page | Tests that hold what it says |", "|---|---|"]
    for page, names in checks_by_page(nav).items():
        if page == "index.md":
            continue
        link = f"[{titles[page]}](../{page})"
        rows.append(f"| {link} | {', '.join(f'`tests/{n}`' for n in names) or 'its code blocks alone'} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "appendix/testing.md":
        return markdown.replace(CHECKS_MARKER, checks_table(config["nav"]))
    return markdown
