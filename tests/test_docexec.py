"""The engine itself (docexec), apart from the pages it executes: what it may import."""

from __future__ import annotations

import ast

import pytest

from docexec.fences import REPO

pytestmark = pytest.mark.fast  # the test tier: see the testing page


def test_the_engine_imports_no_pytest():
    """docexec runs outside pytest too (tools/gpu_check.py, tools/torch_check.py): what fails a test
    lives in tests/support/runs.py."""
    for path in sorted((REPO / "docexec").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {n for n in names if n.split(".")[0] == "pytest"}, f"{path.relative_to(REPO)} imports pytest"
