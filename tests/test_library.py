"""The library by audience (src/distdocs): what readers and examples use at the top, the lab's
equipment in `distdocs.lab`, the benchmarks in `distdocs.bench`, the command line above them all.
Drawn from the imports, the modules form layers; every import points to its own layer or one below,
so there is no cycle, and the command line stays argparse and dispatch."""

from __future__ import annotations

import ast

import pytest

from docexec.commands import ALLOWED_IN_EXAMPLES
from docexec.fences import REPO

pytestmark = pytest.mark.fast  # the test tier: see the testing page

SRC = REPO / "src" / "distdocs"
# Each module, or subpackage, and its layer: an import may point to its own layer or a lower one.
LAYERS = {
    # 0: the pieces that run inside a training job (what examples import), the calculators, and what
    # every command shares
    **dict.fromkeys(["training", "calculators", "__init__", "arguments", "processes"], 0),
    # 1: the reader's tools built on them, and the lab's equipment
    **dict.fromkeys(["doctor", "figures", "lab"], 1),
    # 2: the benchmarks, which measure with the lab's equipment and draw with figures
    "bench": 2,
    # 3: the command line
    "cli": 3,
}


def unit(module: str) -> str:
    """'distdocs.lab.world' -> 'lab'; 'distdocs.cli' -> 'cli'; 'distdocs' -> '__init__'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> dict[str, set[str]]:
    """For each module file under src/distdocs: the distdocs units it imports, lazily or not."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(("distdocs", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                if node.module == "distdocs":  # from distdocs import costmodel, arguments
                    names |= {f"distdocs.{a.name}" for a in node.names if (SRC / a.name).exists()
                              or (SRC / f"{a.name}.py").exists()}  # fmt: skip
        found[module] = {unit(n) for n in names if n.split(".")[0] == "distdocs"} - {unit(module)}
    return found


def test_every_module_has_a_layer_and_imports_point_down_or_across():
    graph = imports()
    missing = {unit(m) for m in graph} - set(LAYERS)
    assert not missing, f"modules without a layer in tests/test_library.py: {missing}"
    upward = [
        f"{m} ({LAYERS[unit(m)]}) imports {u} ({LAYERS[u]})" for m, us in graph.items() for u in us
        if LAYERS[u] > LAYERS[unit(m)]
    ]  # fmt: skip
    assert not upward, upward


def test_the_units_import_each_other_without_a_cycle():
    edges: dict[str, set[str]] = {}
    for module, units in imports().items():
        edges.setdefault(unit(module), set()).update(units)
    done, path = set(), []

    def visit(node: str) -> None:
        assert node not in path, f"an import cycle: {' -> '.join(path[path.index(node) :] + [node])}"
        if node in done:
            return
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(edges):
        visit(node)


def test_what_examples_may_import_imports_nothing_else_of_distdocs():
    """A reader who copies an example gets these modules with `pip install -e .`, or copies them too:
    they must not pull in the rest."""
    for name in ALLOWED_IN_EXAMPLES:
        used = {u for m, us in imports().items() if m == f"distdocs.training.{name}" for u in us}
        assert not used, f"distdocs.training.{name} imports distdocs.{used} beyond distdocs.training"


def test_the_command_line_is_argparse_and_dispatch():
    assert len((SRC / "cli.py").read_text().splitlines()) < 250
