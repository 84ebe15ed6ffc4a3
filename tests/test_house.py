"""The test suite's own house rules. A test module never imports another test module or the conftest:
fixtures and hooks live in tests/plugins/, which tests/conftest.py registers, and what two files share
lives in tests/support/. (Importing a test module runs its collection-time code a second time, under
another name, and ties one test file's helpers to another's tests.)"""

from __future__ import annotations

import ast

import pytest

from docexec.fences import REPO

pytestmark = pytest.mark.fast  # the test tier: see the testing page

TESTS = REPO / "tests"


def imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """Each import's line and every dotted name it could load: `import a.b` and `from a import b`
    both give a.b, so that `from tests import test_lab` is seen too."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found += [(node.lineno, module)] if module else []
            found += [(node.lineno, f"{module}.{alias.name}".lstrip(".")) for alias in node.names]
    return found


def test_no_file_under_tests_imports_a_test_module_or_the_conftest():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")} | {"conftest"}
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, name in imported_modules(ast.parse(path.read_text(), filename=str(path))):
            if any(part in test_modules for part in name.split(".")):
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    advice = "move what they share to tests/support/ (a helper) or tests/plugins/ (a fixture)"
    assert bad == [], advice + ":\n" + "\n".join(bad)
