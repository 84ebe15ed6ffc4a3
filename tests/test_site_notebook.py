"""The lab notebook's page: executed at build time, downloadable, and styled by the cut-down
Jupyter stylesheet exactly as by the whole one."""

from __future__ import annotations

import functools
import re
import sys

import pytest

from docexec.fences import REPO


@pytest.mark.site
def test_lab_notebook_page_is_executed_and_downloadable(site_dir):
    page = (site_dir / "lab/simulate-data-parallel-sync/index.html").read_text()
    for step in (1, 2, 3):  # executed at build time, with allow_errors: false
        assert f"step {step} self-check passed" in page
    assert "data:image/svg+xml;base64" in page  # step 3's chart, drawn by distdocs.bench.emulated
    assert 'href="simulate-data-parallel-sync.ipynb"' in page  # the download button
    import nbformat

    notebook = nbformat.read(
        site_dir / "lab/simulate-data-parallel-sync/simulate-data-parallel-sync.ipynb", as_version=4
    )
    nbformat.validate(notebook)
    assert sum(c.cell_type == "code" for c in notebook.cells) >= 10


def _kept_rules(page_html: str) -> set[tuple[str, str]]:
    """The cut stylesheet's rules, each with the @media or @supports block it sits in ("" if none)."""
    import tinycss2

    cut = re.search(r'<style type="text/css" data-cut-from="index.css">\n(.*?)\n</style>', page_html, re.S)
    assert cut, "no cut-down Jupyter stylesheet"

    def rules(css: str, block: str) -> set[tuple[str, str]]:
        out = set()
        for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
            if rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports") and rule.content:
                out |= rules(tinycss2.serialize(rule.content), block + tinycss2.serialize(rule.prelude))
            else:
                out.add((block, rule.serialize()))
        return out

    return rules(cut[1], "")


@pytest.mark.site
def test_print_page_carries_the_notebook_with_the_same_cut_stylesheet(site_dir):
    """The print page holds the notebook, so mkdocs-jupyter's whole stylesheet came with it (575 KB, 87
    KB gzipped). hooks/print_page.py cuts it with the same function as the notebook's page, against the
    print page's elements, which include the notebook's: it keeps every rule the notebook's page keeps
    (the screenshot test below shows those are enough for the notebook), and no copy of the whole file
    is left."""
    sys.path.insert(0, str(REPO / "hooks"))
    from lab_notebooks import JUPYTER_CSS

    notebook = (site_dir / "lab/simulate-data-parallel-sync/index.html").read_text()
    print_page = (site_dir / "print_page/index.html").read_text()
    assert "step 3 self-check passed" in print_page  # the executed notebook is on it
    assert JUPYTER_CSS.read_text().strip() not in print_page
    missing = _kept_rules(notebook) - _kept_rules(print_page)
    assert not missing, f"rules the notebook's page keeps and the print page dropped: {sorted(missing)[:3]}"


def _fulfill(html: str, route, _request) -> None:
    route.fulfill(body=html, content_type="text/html")


@pytest.mark.site
def test_lab_notebook_page_looks_the_same_as_with_the_whole_jupyter_stylesheet(
    browser, served_site, site_dir, tmp_path
):
    """hooks/lab_notebooks.py keeps only the rules of JupyterLab's stylesheet that can match the page.
    Chromium renders the page with them and with the whole file in its place, in light and dark, on a
    phone and a desktop: the two screenshots must be the same, pixel for pixel."""
    sys.path.insert(0, str(REPO / "hooks"))
    from lab_notebooks import JUPYTER_CSS

    path = "lab/simulate-data-parallel-sync/"
    built = (site_dir / path / "index.html").read_text()
    cut = re.search(r'<style type="text/css" data-cut-from="index.css">\n(.*?)\n</style>', built, re.S)
    assert cut, "the notebook page has no cut-down Jupyter stylesheet"
    whole = built.replace(cut.group(1), JUPYTER_CSS.read_text().strip())
    assert len(cut.group(1)) < len(whole) - len(built) < 20 * len(cut.group(1))  # it was cut, by a lot
    different = []
    for scheme in ("light", "dark"):
        for viewport in ({"width": 412, "height": 915}, {"width": 1280, "height": 900}):
            shots = {}
            for name, markup in (("cut", built), ("whole", whole)):
                context = browser.new_context(color_scheme=scheme, viewport=viewport)
                page = context.new_page()
                page.route(served_site + path, functools.partial(_fulfill, markup))
                page.goto(served_site + path, wait_until="networkidle")
                shots[name] = page.screenshot(full_page=True)
                context.close()
            if shots["cut"] != shots["whole"]:
                for name, png in shots.items():
                    (tmp_path / f"{scheme}-{viewport['width']}-{name}.png").write_bytes(png)
                different.append(f"{scheme}, {viewport['width']} px wide")
    assert not different, f"the page looks different with the whole stylesheet: {different}; see {tmp_path}"
