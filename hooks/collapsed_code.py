"""A MkDocs hook: code inside a collapsed block (a `???` block the reader opens: "The whole file"
listings, exercise solutions, a long excerpt the page folds away) is shown without syntax colours.

Highlighting wraps every token in a <span>; a 150-line example makes about 1,500 of them, and the
browser styles them at load whether the block is open or not. In Lighthouse's phone profile that
was most of a page's blocking time (`make audit`; the testing page shows its scores). The code a page
shows open keeps its colours; a collapsed block is there to read through and copy, and its text is
unchanged."""

from __future__ import annotations

import re
from collections.abc import Iterator

DETAILS = re.compile(r"<details\b([^>]*)>|</details>")
OPEN = re.compile(r"\bopen\b")
CODE = re.compile(r"<code>(.*?)</code>", re.S)
SPAN = re.compile(r"</?span\b[^>]*>")


def collapsed_blocks(html: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every outermost <details> that starts closed, nested blocks inside it included."""
    depth, start = 0, 0  # depth: how deep inside the current closed block; 0 outside any
    for tag in DETAILS.finditer(html):
        if tag[1] is not None:  # an opening tag
            if depth:
                depth += 1
            elif not OPEN.search(tag[1]):
                start, depth = tag.start(), 1
        elif depth:
            depth -= 1
            if depth == 0:
                yield start, tag.end()


def plain_code(html: str) -> str:
    return CODE.sub(lambda code: "<code>" + SPAN.sub("", code[1]) + "</code>", html)


def on_post_page(output: str, page, config) -> str:
    pieces, done = [], 0
    for start, end in collapsed_blocks(output):
        pieces += [output[done:start], plain_code(output[start:end])]
        done = end
    return "".join(pieces) + output[done:]
