"""The library by audience (src/distdocs): what readers and examples use at the top, the lab's
equipment in `distdocs.lab`, the benchmarks in `distdocs.bench`, the command line above them all.
Drawn from the imports, the modules form layers; every import points to its own layer or one below,
so there is no cycle, and the command line stays argparse and dispatch. Inside `distdocs.bench` each
module is a unit of its own: the harness and the measurements several benchmarks run sit below the
benchmarks, and no benchmark imports another. No module imports another's private (`_`) names."""

from __future__ import annotations

import ast

import pytest

from docexec.copies import ALLOWED_IN_EXAMPLES
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
    # 2: what the benchmarks share: the harness, and the measurements that more than one benchmark runs
    **dict.fromkeys(["bench", "bench.harness", "bench.allreduce_sweep", "bench.ddp_steps", "bench.killed_run"], 2),
    # 3: the benchmarks, every other module of distdocs.bench: each measures with the lab's equipment,
    # draws with figures, and shares through layer 2 alone (test_a_benchmark_imports_no_other_benchmark)
    # 4: the command line
    "cli": 4,
}
BENCHMARKS = 3


def layer(unit_name: str) -> int | None:
    """A unit's layer: LAYERS's, or BENCHMARKS for a module of distdocs.bench that LAYERS leaves out."""
    if unit_name in LAYERS:
        return LAYERS[unit_name]
    return BENCHMARKS if unit_name.startswith("bench.") else None


def unit(module: str) -> str:
    """'distdocs.lab.world' -> 'lab'; 'distdocs.bench.allreduce' -> 'bench.allreduce' (each module of
    bench is a unit of its own); 'distdocs.cli' -> 'cli'; 'distdocs' -> '__init__'."""
    parts = module.split(".")
    if parts[1:2] == ["bench"] and len(parts) > 2:
        return f"bench.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def is_module(name: str) -> bool:
    """Whether `name` (distdocs.x.y) is a module or package of src/distdocs."""
    path = SRC.joinpath(*name.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


def module_name(path) -> str:
    return ".".join(("distdocs", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")


def imports() -> dict[str, set[str]]:
    """For each module file under src/distdocs: the distdocs units it imports, lazily or not."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        module = module_name(path)
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                # from distdocs import arguments; from distdocs.bench import killed_run: the modules named
                names |= {f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")}
        found[module] = {unit(n) for n in names if n.split(".")[0] == "distdocs"} - {unit(module)}
    return found


def test_every_module_has_a_layer_and_imports_point_down_or_across():
    graph = imports()
    missing = {unit(m) for m in graph if layer(unit(m)) is None}
    assert not missing, f"modules without a layer in tests/test_library.py: {missing}"
    upward = [
        f"{m} ({layer(unit(m))}) imports {u} ({layer(u)})" for m, us in graph.items() for u in us
        if layer(u) > layer(unit(m))
    ]  # fmt: skip
    assert not upward, upward


def test_a_benchmark_imports_no_other_benchmark():
    """A benchmark imports the harness and the shared measurements (layer 2), never another benchmark:
    what two benchmarks share moves down. And the benchmarks are what `distdocs bench` runs."""
    from distdocs.cli import BENCHMARKS as RUNS

    graph = imports()
    benchmarks = {unit(m) for m in graph if layer(unit(m)) == BENCHMARKS}
    assert benchmarks == {f"bench.{name}" for name in RUNS}, "a benchmark `distdocs bench` does not run, or the reverse"
    across = [
        f"{m} imports the benchmark distdocs.{u}: move what they share to the harness"
        for m, us in graph.items() if unit(m) in benchmarks for u in us if u in benchmarks
    ]  # fmt: skip
    assert not across, across


def private_uses(path) -> list[str]:
    """Where the module at `path` imports a private name (`_x`, not `__x__`) of another distdocs module,
    or reads one off a distdocs module it imported: 'line: distdocs.x._y'."""
    tree = ast.parse(path.read_text())
    modules: dict[str, str] = {}  # a local name bound to a distdocs module -> that module
    uses = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "distdocs":
                    modules[a.asname or "distdocs"] = a.name if a.asname else "distdocs"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "distdocs":
            for a in node.names:
                if is_module(f"{node.module}.{a.name}"):
                    modules[a.asname or a.name] = f"{node.module}.{a.name}"
                elif private(a.name):
                    uses.append(f"{node.lineno}: {node.module}.{a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules and private(chain[-1]):
                owner = ".".join([modules[value.id], *chain[:-1]])
                if is_module(owner):
                    uses.append(f"{node.lineno}: {owner}.{chain[-1]}")
    return sorted(uses, key=lambda use: (int(use.split(":")[0]), use))


def test_no_module_imports_a_private_name_of_another():
    """A name that starts with `_` is its module's own: a second module that needs it needs it public,
    under a name that says what it is, in the module both may import."""
    found = [f"{module_name(path)}:{use}" for path in sorted(SRC.rglob("*.py")) for use in private_uses(path)]
    assert not found, found


def test_the_private_name_check_sees_both_spellings(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from distdocs.bench.harness import _x, machine_line\n"
        "from distdocs.lab import links\n"
        "import distdocs.lab.world as world\n"
        "links._sh('ip'); world._serve; links.Network; world.__name__\n"
    )
    assert private_uses(probe) == [
        "1: distdocs.bench.harness._x",
        "4: distdocs.lab.links._sh",
        "4: distdocs.lab.world._serve",
    ]


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
