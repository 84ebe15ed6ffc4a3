"""The whole site as one PDF, made from the print page as `make pdf` makes it."""

from __future__ import annotations

import html as html_module
import html.parser
import re

import pytest

from tools.browser import PRINT_PAGE, save_pdf


@pytest.mark.site
def test_pdf_of_the_print_page_has_every_chapter_on_its_own_page_and_no_code_cut_off(
    browser, served_site, site_dir, tmp_path
):
    """`make pdf`'s PDF, made here the same way. Each page of the site (a chapter) starts a PDF page
    with its title, and every line of every code block on the print page is in the PDF's text, whole.
    Under print styles no code block is wider than its box, so none is clipped, or hidden in a tab."""

    from pypdf import PdfReader

    pdf = tmp_path / "distdocs.pdf"
    overflow = save_pdf(browser, served_site, pdf)
    assert not overflow, f"code blocks clipped or hidden in print: {overflow}"

    # Text in the order it is laid out on each page, without the page number in the bottom margin.
    pages = [p.extract_text(extraction_mode="layout") for p in PdfReader(pdf).pages]
    pages = [re.sub(r"\s*Page \d+\s*$", "", p) for p in pages]
    print_page = (site_dir / PRINT_PAGE / "index.html").read_text()

    def text_of(fragment: str) -> str:
        return html_module.unescape(re.sub(r"<[^>]+>", "", fragment))

    # A chapter's title is the first h1 in its section (the notebook's sits in its first cell).
    sections = re.split(r'<section class="print-page[^"]*" id="[^"]+"', print_page)[1:]
    titles = [
        " ".join(text_of(re.search(r"<h1[^>]*>(.*?)</h1>", s, re.S)[1]).replace("¶", "").split()) for s in sections
    ]
    assert len(titles) >= 28, titles  # every page in the nav
    starts = [" ".join(p.split())[:200] for p in pages]
    missing = [title for title in titles if not any(start.startswith(title) for start in starts)]
    assert not missing, f"chapters that do not start a PDF page: {missing}"

    whole = re.sub(r"\s+", "", "".join(pages))
    code_block = re.compile(r"<pre[^>]*>(?:<span></span>)?<code[^>]*>(.*?)</code></pre>", re.S)
    blocks = code_block.findall(print_page)
    pages_blocks = sum(
        len(code_block.findall(p.read_text())) for p in site_dir.rglob("index.html") if PRINT_PAGE not in str(p)
    )
    assert len(blocks) == pages_blocks, "the print page should hold every code block of the site's pages"
    lines = [re.sub(r"\s+", "", ln) for block in blocks for ln in text_of(block).splitlines()]
    lines = [ln for ln in lines if ln]
    cut = [ln for ln in lines if ln not in whole]
    assert not cut, f"{len(cut)} of {len(lines)} code lines not whole in the PDF: {cut[:5]}"
