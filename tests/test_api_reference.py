"""docs/reference/api.md renders the public API of distdocs from its docstrings: every module it
lists exists, every public function, class and method there has a docstring (the strict build
fails on a malformed one), and the pages that use the API link to it."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from docexec.fences import DOCS

pytestmark = pytest.mark.fast  # the test tier: see the testing page

PAGE = DOCS / "reference/api.md"


def documented_modules() -> list[str]:
    return re.findall(r"^::: (distdocs\.[\w.]+)$", PAGE.read_text(), flags=re.M)


def public_members(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member) and attr != "forward":
                        yield f"{module.__name__}.{name}.{attr}", member


def test_the_reference_covers_the_library_the_issue_names():
    names = set(documented_modules())
    assert {
        "distdocs.training.collectives",
        "distdocs.training.ddp",
        "distdocs.calculators.memory",
        "distdocs.calculators.costmodel",
    } <= names
    assert {
        "distdocs.calculators.sync_simulation",
        "distdocs.training.checkpoint",
        "distdocs.training.pipeline",
    } <= names


def test_every_public_function_and_class_has_a_docstring():
    missing = [
        qualified
        for module_name in documented_modules()
        for qualified, obj in public_members(importlib.import_module(module_name))
        if not (inspect.getdoc(obj) or "").strip()
    ]
    assert not missing, f"public API without a docstring (the reference would show it bare): {missing}"


def test_pages_that_use_the_api_link_to_it():
    for page in ["operations/checkpoint-and-resume.md", "lab/scaling-explorer.md", "reference/cli.md"]:
        assert "api.md#distdocs." in (DOCS / page).read_text(), f"{page} does not link to the reference"
