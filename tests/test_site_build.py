"""The built site, read as files: `mkdocs build --strict` is clean, includes are expanded,
collapsed code is plain, every link inside the site resolves, and nothing loads from another host.
The build itself is the `site_dir` fixture (tests/plugins/built_site.py), shared by every test_site_* module."""

from __future__ import annotations

import html as html_module
import html.parser
import re
import sys
import urllib.parse
from pathlib import Path

import pytest

from docexec.fences import REPO

# An asset that the browser loads by itself: scripts, stylesheets, icons, images, frames.
LOADED_URL = re.compile(
    r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["'](https?:)?//"""
    r"""|<link\b(?![^>]*\brel=["']canonical)[^>]*\bhref=["'](https?:)?//""",  # a canonical URL is not loaded
    re.I,
)


@pytest.mark.site
def test_strict_build_has_every_page(site_dir):
    for page in [
        "index.html",
        "start/overview/index.html",
        "lesson/data-parallelism/index.html",
        "appendix/testing/index.html",
    ]:
        assert (site_dir / page).is_file(), page


@pytest.mark.site
def test_every_fence_is_rendered_as_code(site_dir):
    """A fence whose info string the renderer does not take (`bash root` once did) shows its backticks
    as text and swallows what follows into a code block; the page tests, which read the Markdown, pass."""
    broken = [str(p.relative_to(site_dir)) for p in site_dir.rglob("*.html") if "<p>```" in p.read_text()]
    assert not broken, f"fences shown as text: {broken}"


@pytest.mark.site
def test_includes_are_expanded_in_the_built_page(site_dir):
    html = (site_dir / "lesson/data-parallelism/index.html").read_text()
    assert "average_gradients" in html and "--8&lt;--" not in html


@pytest.mark.site
def test_collapsed_code_is_plain_text_and_open_code_keeps_its_colours(site_dir):
    """hooks/collapsed_code.py: inside a block that starts closed (nested blocks too) code carries no
    highlighting spans and its text is the file's; code shown open keeps its colours."""
    sys.path.insert(0, str(REPO / "hooks"))
    from collapsed_code import collapsed_blocks

    page = (site_dir / "lesson/collectives/index.html").read_text()
    spans = list(collapsed_blocks(page))
    blocks = [page[start:end] for start, end in spans]
    assert len(blocks) >= 3  # the whole file, a folded excerpt, the exercise's solution
    assert all("<span" not in code for block in blocks for code in re.findall(r"<code>(.*?)</code>", block, re.S))
    lines = (REPO / "examples/collectives/step01_collectives_tour.py").read_text().splitlines(keepends=True)
    tour = "".join(line for line in lines if "--8<--" not in line)  # snippets drops its section markers
    listing = next(b for b in blocks if "The whole file: <code>examples/collectives/step01" in b)
    shown = re.search(r"<pre>.*?<code>(.*?)</code>", listing, re.S)[1]
    assert html_module.unescape(shown) == tour
    outside = "".join(page[end:start] for (_, end), (start, _) in zip([(0, 0), *spans], [*spans, (len(page), 0)]))
    assert '<code><span class="kn">import</span>' in outside or '<span class="k">def</span>' in outside

    nested = '<details><details open><code><span class="k">x</span></code></details></details>'
    assert [nested[s:e] for s, e in collapsed_blocks(nested + "<details open>y</details>")] == [nested]


@pytest.mark.site
def test_every_page_has_a_canonical_url_and_an_edit_link(site_dir):
    for page in ("index.html", "lesson/data-parallelism/index.html", "multi-gpu/debugging/index.html"):
        html = (site_dir / page).read_text()
        assert 'rel="canonical" href="https://' in html, page
        assert "/edit/main/docs/" in html, page  # Material's edit button, from edit_uri
        assert 'data-md-component="source"' not in html, page  # it would fetch repository facts


class _Links(html.parser.HTMLParser):
    """The hrefs and the ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


@pytest.mark.site
def test_every_link_inside_the_site_reaches_its_page_and_anchor(site_dir):
    pages = {}
    for page in site_dir.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text())
        pages[page] = parser
    site_url = re.search(r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.M).group(1)
    base = urllib.parse.urlparse(site_url).path
    broken = []
    for page, links in pages.items():
        for href in links.hrefs:
            if re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I) or href.startswith("//"):
                continue  # another site (checked by `make check-upstream`), mailto:, data:
            path, _, anchor = urllib.parse.unquote(href).partition("#")
            if path.startswith("/"):  # absolute, under site_url's path (the 404 page links this way)
                path = str(site_dir / path.removeprefix(base).lstrip("/"))
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site_dir)}: {href} (no such page)")
            elif anchor and target.suffix == ".html" and anchor not in pages.get(target, _Links()).ids:
                broken.append(f"{page.relative_to(site_dir)}: {href} (no such anchor)")
    assert not broken, broken


@pytest.mark.site
def test_every_page_finds_the_theme_and_search_index_by_a_relative_base(site_dir):
    """Material's scripts fetch the search index from the page's configured base. An absolute one
    (`/distdocs/`, site_url's path, which the print page inherited from the 404 page's context)
    breaks search wherever the site is served from another path: `make serve`, a fork, a file copy.
    The 404 page alone needs it absolute, since it is served at any depth."""
    absolute = []
    for page in site_dir.rglob("index.html"):
        text = page.read_text()
        base = re.search(r'"base": "([^"]*)"', text)
        assert base, f"{page.relative_to(site_dir)}: no theme config"
        if base[1].startswith("/") or 'new URL("/' in text:
            absolute.append(str(page.relative_to(site_dir)))
    assert not absolute, absolute


@pytest.mark.site
def test_no_page_loads_anything_from_another_host(site_dir):
    offenders = []
    for page in site_dir.rglob("*.html"):
        offenders += [f"{page.relative_to(site_dir)}: {m.group(0)}" for m in LOADED_URL.finditer(page.read_text())]
    assert not offenders, offenders
    assert not any("fonts.googleapis" in p.read_text() for p in site_dir.rglob("*.html"))
    # nor a script that would import one later (nbconvert's Mermaid loader names its CDN this way)
    imports = [
        f"{page.relative_to(site_dir)}: {url}"
        for page in site_dir.rglob("*.html")
        for script in re.findall(r"<script\b[^>]*>(.*?)</script>", page.read_text(), re.S)
        for url in re.findall(r"(?:https?:)?//[\w.-]+/[^\s\"'`]*\.m?js\b", script)
    ]
    assert not imports, imports


# Each override of a Material partial: the one change it makes to Material's own file.
OVERRIDES = {
    "search.html": (
        '<div class="md-search" data-md-component="search" role="dialog">',
        '<div class="md-search" data-md-component="search" role="dialog" aria-label="{{ lang.t(\'search\') }}">',
    ),
    "source.html": (' class="md-source" data-md-component="source">', ' class="md-source">'),
}


@pytest.mark.fast
@pytest.mark.parametrize("name", OVERRIDES)
def test_each_theme_override_is_materials_partial_with_its_one_change(name):
    """overrides/partials/ copies two of Material's partials to change one line each (a name for the
    search dialog, which axe asks for; a repository link that fetches nothing). When a Material
    upgrade changes its partial, this fails, so that the copy is redone rather than silently kept."""
    import material

    def without_leading_comment(text: str) -> str:
        return re.sub(r"\A\{#-.*?-#\}\n", "", text, flags=re.S)

    theirs = without_leading_comment((Path(material.__file__).parent / "templates/partials" / name).read_text())
    ours = without_leading_comment((REPO / "overrides/partials" / name).read_text())
    before, after = OVERRIDES[name]
    assert theirs.count(before) == 1, f"Material's {name} changed: redo overrides/partials/{name}"
    assert ours == theirs.replace(before, after), f"overrides/partials/{name} differs from Material's by more"
