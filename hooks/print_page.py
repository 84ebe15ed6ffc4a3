"""A MkDocs hook that tidies the print page (mkdocs-print-site-plugin's whole site on one page):
- it repeats every page's inline scripts and styles, and mkdocs-quiz alone adds 55 KB to each page
  with a quiz: keep the first copy of each, so the page weighs what its content does;
- it turns a bare `href="#"` (mkdocs-quiz's "reset" link) into `#<page id>-`: turn it back;
- it prefixes the links to each quiz (`#<page id>-quiz-0`) but not the quizzes' own ids, which
  repeat from page to page: prefix those too, and the labels and radio groups that name them;
- a few links still miss: the home page becomes `#.`, the API reference's headings keep their
  unprefixed ids, and its references to objects outside distdocs (`RuntimeError`) become links to
  nowhere. Point the first two where they belong, and make the last plain text, as on the page;
  the scaling explorer's labels (`for=`) are prefixed like links, and are repointed the same way;
- the lab notebook's code cells get the tabindex that hooks/lab_notebooks.py gives them on their page,
  and lose nbconvert's Mermaid loader as there; JupyterLab's stylesheet, inlined whole (575 KB, 87 KB
  gzipped), is cut down to the rules that can match the print page, as there;
- Material's search on the page would fetch the site's search index (230 KB gzipped, a quarter of
  the page's weight) to find what the browser's own find (Ctrl+F) finds on a page that holds the
  whole site: drop the search box and its button. Material's script fetches the index only for a
  page with a search form, and mounts search only where the box is; the hidden toggle stays, since
  the script sets it on every navigation;
- the plugin renders the page with the 404 page's context, whose base is site_url's absolute path
  (`/distdocs/`): served anywhere else, the theme would fetch its search index from a wrong
  address. Make the base relative, `..`, as on every other page."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

# mkdocs puts hooks/ on the path while it loads a hook
from lab_notebooks import drop_mermaid_loader, focusable_cells, prune_jupyter_css

INLINE = re.compile(r"<(script|style)\b[^>]*>.*?</\1>", re.S)
PREFIXED_BARE_HASH = re.compile(r'href="#[\w-]+-"')
SECTION = re.compile(r'(<section class="print-page[^"]*" id="([\w-]+)")')
QUIZ_ID = re.compile(r'\b(id|for|name)="quiz-(?=\d)')
HASH_LINK = re.compile(r'(href="#|\bfor=")([^"]*)"')
AUTOREF = re.compile(r'<a class="autorefs autorefs-internal"(?: title="[^"]*")? href="#([^"]+)">(.*?)</a>')


def drop_repeated_inline_blocks(html: str) -> str:
    seen: set[str] = set()

    def once(match: re.Match) -> str:
        block = match.group(0)
        if "src=" in block.split(">", 1)[0] or block not in seen:
            seen.add(block)
            return block
        return ""

    return INLINE.sub(once, html)


def prefix_quiz_ids(html: str) -> str:
    parts = SECTION.split(html)  # text, then (opening tag, page id, text) for each page
    out = [parts[0]]
    for tag, page_id, text in zip(parts[1::3], parts[2::3], parts[3::3]):
        out += [tag, QUIZ_ID.sub(rf'\1="{page_id}-quiz-', text)]
    return "".join(out)


def repair_anchor_links(html: str) -> str:
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    pages = [page_id for _, page_id in SECTION.findall(html)]
    html = AUTOREF.sub(lambda m: m[0] if m[1] in ids else f'<span title="{m[1]}">{m[2]}</span>', html)

    def resolve(match: re.Match) -> str:
        attribute, target = match[1], match[2]
        if target in ids or not target:
            return match[0]
        if target == ".":
            return f'{attribute}{pages[0]}"'
        for page_id in pages:
            if target.startswith(page_id + "-") and target[len(page_id) + 1 :] in ids:
                return f'{attribute}{target[len(page_id) + 1 :]}"'
        return match[0]

    return HASH_LINK.sub(resolve, html)


SEARCH_BUTTON = re.compile(r'\s*<label class="md-header__button md-icon" for="__search">.*?</label>', re.S)
SEARCH_BOX = '<div class="md-search" data-md-component="search"'


def drop_search(html: str) -> str:
    """`html` without Material's search button and search box (the box's <div>, closed where its
    nesting ends)."""
    html, buttons = SEARCH_BUTTON.subn("", html, count=1)
    start = html.find(SEARCH_BOX)
    if not buttons or start < 0:
        raise RuntimeError("print page: Material's search button or box is not where hooks/print_page.py expects")
    depth = 0
    for tag in re.finditer(r"<div\b|</div>", html[start:]):
        depth += 1 if tag[0] == "<div" else -1
        if depth == 0:
            return html[:start] + html[start + tag.end() :]
    raise RuntimeError("print page: Material's search box never closes")


def relative_base(html: str, site_url: str | None) -> str:
    absolute = urllib.parse.urlparse(site_url or "/").path or "/"
    html = html.replace(f'"base": "{absolute}"', '"base": ".."')
    return html.replace(f'__md_scope=new URL("{absolute}",location)', '__md_scope=new URL("..",location)')


def on_post_build(config, **kwargs) -> None:
    page = Path(config["site_dir"]) / "print_page" / "index.html"
    if page.exists():
        html = relative_base(drop_repeated_inline_blocks(page.read_text()), config.get("site_url"))
        html = prefix_quiz_ids(PREFIXED_BARE_HASH.sub('href="#"', html))
        html = prune_jupyter_css(drop_mermaid_loader(focusable_cells(html), "print_page"))
        html = drop_search(html)
        page.write_text(repair_anchor_links(html))
