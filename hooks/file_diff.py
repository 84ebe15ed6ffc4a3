"""A MkDocs hook: the diff between two example files, rendered when the site is built. A page writes

    <!-- diff: convert/step01_one_process.py convert/step02_ddp.py -->

on a line of its own and gets a `diff` code block: the second file against the first, paths under
examples/. Both files are run by the tests, so the diff on the page cannot drift from them."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MARK = re.compile(r"^(?P<indent>[ \t]*)<!-- diff: (?P<a>\S+) (?P<b>\S+) -->[ \t]*$", re.M)
CONTEXT = 2  # unchanged lines shown around each change


def render(a: str, b: str) -> str:
    """The unified diff of examples/`b` against examples/`a`, without its two header lines and without
    the snippet markers (`# --8<-- [start:name]`), which are the site's plumbing, not the reader's code."""
    before, after = ([ln for ln in (EXAMPLES / name).read_text().splitlines() if "--8<--" not in ln] for name in (a, b))
    lines = difflib.unified_diff(before, after, a, b, n=CONTEXT, lineterm="")
    return "\n".join(list(lines)[2:])


def on_page_markdown(markdown: str, page, config, files) -> str:
    def block(m: re.Match) -> str:
        indent = m.group("indent")
        body = "\n".join(indent + line for line in render(m.group("a"), m.group("b")).splitlines())
        return f'{indent}```diff title="{m.group("b")}, against {m.group("a")}"\n{body}\n{indent}```'

    return MARK.sub(block, markdown)
