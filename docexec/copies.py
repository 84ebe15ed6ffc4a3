"""A command that names examples runs as a reader's copy would: in an empty folder that holds copies of
those files, beside a reader's own files, with `distdocs` reduced to the modules examples may import
(`distdocs.training`). It passes only if the examples run with torch alone, and a snapshot of the
folder before and after says whether the run disturbed what it did not create."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
from pathlib import Path

from docexec.commands import EXIT_PROBE
from docexec.fences import REPO

# What a copied-out example finds beside it before it runs: a reader's folder that already holds a
# `checkpoints/` folder (the examples' default) with files of the reader's own. A run must leave
# these as they were (test_examples.py): an example deletes nothing it did not create in this run.
READERS_FILES = {
    "checkpoints/README-reader.txt": "the reader's own notes, in the folder the examples checkpoint to\n",
    "checkpoints/step-sentinel.bin": "bytes that are not a checkpoint\n",
    "notes.txt": "a file of the reader's, beside the example\n",
}
EXAMPLE_PATH = re.compile(r"\bexamples/[\w/]+\.py\b")
# The distdocs modules an example may import: those of `distdocs.training`, the pieces that run
# inside a training job, each with the first line of its docstring as the reason. They import nothing
# from distdocs but each other (tests/test_library.py), so that a reader who copies an example and
# `pip install -e .` gets all an example needs.
TRAINING = REPO / "src" / "distdocs" / "training"
ALLOWED_IN_EXAMPLES = {
    path.stem: ast.get_docstring(ast.parse(path.read_text())).split("\n")[0]
    for path in sorted(TRAINING.glob("*.py"))
    if path.stem != "__init__"
}


def snapshot(folder: Path, only: set[str] | None = None) -> dict[str, str]:
    """Every file under `folder` (or those of `only` that still exist), by relative path, with a hash
    of its bytes."""
    files = sorted(folder.rglob("*")) if only is None else [folder / p for p in sorted(only)]
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def lay_out_as_copied(command: str, folder: Path) -> dict[str, str]:
    """Copy each example that `command` names into `folder`, at the same relative path, next to a
    `distdocs` that holds only the modules examples may import; return the environment variables
    that put that `distdocs` first on the import path. Run from `folder`, the command then works
    only if its examples run with torch alone, as a reader's copies must."""
    for relative in set(EXAMPLE_PATH.findall(command)):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, folder / relative)
    package = folder / "allowed" / "distdocs"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Only the modules that examples may import."""\n')
    shutil.copytree(TRAINING, package / "training", ignore=shutil.ignore_patterns("__pycache__"))
    return {"PYTHONPATH": os.pathsep.join([str(EXIT_PROBE), str(folder / "allowed")])}


def set_up_as_reader(command: str, folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """`folder` as a reader's own: the examples `command` names, copied out (lay_out_as_copied), beside
    READERS_FILES. Returns the environment variables the run needs, and the snapshot to compare with
    afterwards (disturbed)."""
    env = lay_out_as_copied(command, folder)
    for relative, text in READERS_FILES.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return env, snapshot(folder)


def disturbed(folder: Path, before: dict[str, str]) -> list[str]:
    """The files of `before` (a snapshot) that a run changed or removed: what the run wrote is its own."""
    after = snapshot(folder, only=set(before)) if before else {}
    return [f"{p} ({'removed' if p not in after else 'changed'})" for p in before if before[p] != after.get(p)]
