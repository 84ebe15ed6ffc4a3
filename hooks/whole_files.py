"""A MkDocs hook: the collapsed "The whole file" listings are shown without syntax colours.

Highlighting wraps every token in a <span>; a 150-line example makes about 1,500 of them, and a page
with a few such listings keeps several thousand elements that the browser styles and lays out at
load, closed or not. In Lighthouse's phone profile that was most of the page's blocking time (the
checkpoint page: about 900 ms, 190 ms with the listings plain; see `make audit`). The excerpts that
the page discusses keep their colours; the whole file is there to read through and copy."""

from __future__ import annotations

import re

WHOLE_FILE = re.compile(r'<details class="example">\s*<summary>The whole file.*?</details>', re.S)
CODE = re.compile(r"<code>(.*?)</code>", re.S)
SPAN = re.compile(r"</?span\b[^>]*>")


def plain_code(listing: re.Match) -> str:
    return CODE.sub(lambda code: "<code>" + SPAN.sub("", code[1]) + "</code>", listing[0])


def on_post_page(output: str, page, config) -> str:
    return WHOLE_FILE.sub(plain_code, output)
