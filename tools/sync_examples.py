"""`make sync-examples`: stamp the blocks of tools/example_blocks.py, the one source of what the examples
repeat by design, into every copy of them under examples/.

    python -m tools.sync_examples           # rewrite the copies that differ, and list them
    python -m tools.sync_examples --check   # change nothing; exit 1 if any copy differs

A copy is found as tools/example_blocks.py says (a snippet section, the comment above NPROC_PER_NODE, a
top-level function of a block's name), and only its lines are replaced: the rest of the file, edits
in progress included, stays as it is. An example without a block keeps going without it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from docexec.fences import REPO, all_examples

SOURCE = REPO / "tools/example_blocks.py"
SNIPPETS = ("setup",)  # between `# --8<-- [start:NAME]` and `# --8<-- [end:NAME]`
FUNCTIONS = ("log", "now", "usage_error", "release_dtensor_caches", "save_atomically")
TIMEOUT_COMMENT = "timeout_comment"  # the comment lines right above `NPROC_PER_NODE = `
BLOCKS = (*SNIPPETS, TIMEOUT_COMMENT, *FUNCTIONS)


def block_lines(text: str, where: str = "") -> dict[str, tuple[int, int]]:
    """Each block's lines in `text`, as [start, end) indices into text.splitlines(keepends=True)."""
    lines = text.splitlines(keepends=True)
    found: dict[str, tuple[int, int]] = {}
    for name in SNIPPETS:
        start = [i for i, line in enumerate(lines) if line.strip() == f"# --8<-- [start:{name}]"]
        end = [i for i, line in enumerate(lines) if line.strip() == f"# --8<-- [end:{name}]"]
        if start or end:
            if len(start) != 1 or len(end) != 1 or end[0] < start[0]:
                raise ValueError(f"{where}: section {name!r} needs one start marker and one end marker after it")
            found[name] = (start[0] + 1, end[0])
    constant = next((i for i, line in enumerate(lines) if line.startswith("NPROC_PER_NODE = ")), None)
    if constant is not None:
        start = constant
        while start > 0 and lines[start - 1].startswith("#") and not lines[start - 1].startswith("# --8<--"):
            start -= 1
        found[TIMEOUT_COMMENT] = (start, constant)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise ValueError(f"{where}: does not parse ({error}); fix it first") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS:
            if node.name in found:
                raise ValueError(f"{where}: defines {node.name}() twice")
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = (first - 1, node.end_lineno)
    spans = sorted(found.values())
    if any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])):
        raise ValueError(f"{where}: two blocks overlap: {found}")
    return found


def source_blocks() -> dict[str, str]:
    """The text of every block, from the one source."""
    text = SOURCE.read_text()
    lines = text.splitlines(keepends=True)
    found = block_lines(text, str(SOURCE.relative_to(REPO)))
    missing = set(BLOCKS) - set(found)
    if missing:
        raise ValueError(f"{SOURCE.relative_to(REPO)} lacks the blocks {sorted(missing)}")
    return {name: "".join(lines[start:end]) for name, (start, end) in found.items()}


def stamp(text: str, blocks: dict[str, str], where: str = "") -> tuple[str, list[str]]:
    """`text` with each block it has replaced by the source's, and the names of those that differed."""
    lines = text.splitlines(keepends=True)
    found = block_lines(text, where)
    changed = [name for name in BLOCKS if name in found and "".join(lines[slice(*found[name])]) != blocks[name]]
    for name in sorted(changed, key=lambda n: found[n][0], reverse=True):  # from the bottom: spans stay valid
        start, end = found[name]
        lines[start:end] = [blocks[name]]
    return "".join(lines), changed


def differing_blocks(path: Path) -> list[str]:
    """The blocks of the example at `path` that differ from the source (the drift test's question)."""
    return stamp(path.read_text(), source_blocks(), str(path.relative_to(REPO)))[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any copy differs")
    args = parser.parse_args(argv)
    blocks = source_blocks()
    drifted = 0
    for path in all_examples():
        where = str(path.relative_to(REPO))
        text = path.read_text()
        new, changed = stamp(text, blocks, where)
        if not changed:
            continue
        drifted += 1
        if args.check:
            for name in changed:
                print(f"{where}: block {name} differs from {SOURCE.relative_to(REPO)}")
        else:
            path.write_text(new)
            print(f"{where}: stamped {', '.join(changed)}")
    if args.check and drifted:
        print(f"{drifted} examples differ from their one source: run make sync-examples", file=sys.stderr)
        return 1
    if not drifted:
        print(f"every copy matches {SOURCE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
