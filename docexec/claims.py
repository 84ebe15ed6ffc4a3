"""Which command fences a test claims: a command whose run a test checks by what it prints, rather than
by an Output or Excerpt block after it. A test claims a fence by finding it with
`docexec.fences.page_command(PAGE, TEXT)` or `page_fences(PAGE, KIND)` (with constant arguments);
`claimed_fences()` reads every test file for those calls, so that the coverage test can fail on a
command that nothing checks beyond its exit code."""

from __future__ import annotations

import ast
from pathlib import Path

from docexec.fences import REPO, Fence, all_fences

TESTS = REPO / "tests"


def _name(call: ast.Call) -> str:
    return getattr(call.func, "id", getattr(call.func, "attr", ""))


def constant_calls(source: str, name: str) -> list[tuple]:
    """The first two arguments of every call of `name` in `source` whose first two are constants."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node) == name and len(node.args) >= 2:
            if all(isinstance(a, ast.Constant) for a in node.args[:2]):
                calls.append(tuple(a.value for a in node.args[:2]))
    return calls


def claimed_fences(tests: Path = TESTS, fences: list[Fence] | None = None) -> dict[str, set[str]]:
    """The command fences that tests check by what they print, as {page: {command, ...}}: the text
    of each page_command(PAGE, TEXT) call in tests/test_*.py, and every fence that a
    page_fences(PAGE, KIND) call there returns."""
    fences = all_fences() if fences is None else fences
    claimed: dict[str, set[str]] = {}
    for module in sorted(tests.glob("test_*.py")):
        source = module.read_text()
        for page, text in constant_calls(source, "page_command"):
            claimed.setdefault(page, set()).add(text)
        for page, kind in constant_calls(source, "page_fences"):
            claimed.setdefault(page, set()).update(
                f.command for f in fences if f.where.startswith(page + ":") and f.kind == kind
            )
    return claimed
