"""Every page in Chromium, one load each: its weight, its console errors, and axe-core's
accessibility rules in the light and the dark colour scheme."""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from pathlib import Path

import pytest

PAGE_BUDGET, NOTEBOOK_BUDGET = 1_000_000, 1_500_000  # bytes a reader's browser transfers for one page
# Material's script fetches the search index on every page with a search box, and starts the search
# worker beside it. The print page has none (hooks/print_page.py).
SEARCH_INDEX, SEARCH_WORKER = re.compile(r"/search/search_index\.json$"), re.compile(r"/workers/search\.\w+\.min\.js$")
# The rules whose result depends on colour. The dark scheme changes the theme's colours and nothing else,
# so after the whole of axe in the light scheme, only these run again in the dark one.
COLOUR_RULES = ["color-contrast", "link-in-text-block"]


def _axe_findings(page, axe, label: str, options: dict | None = None) -> list[str]:
    """axe-core's serious and critical violations on `page`, one line each. axe is injected once per
    page load: a second run in the same page reuses it."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(axe.axe_script)
    options = {"resultTypes": ["violations"], **(options or {})}
    violations = page.evaluate("options => axe.run(document, options).then(r => r.violations)", options)
    return [
        f"{label}: {rule['id']} ({len(rule['nodes'])} elements: "
        + ", ".join(" ".join(node["target"]) for node in rule["nodes"][:3])
        + ")"
        for rule in violations
        if rule["impact"] in ("serious", "critical")
    ]


def _weight(fetched: list[str], site_dir: Path, path: str) -> tuple[int, list[str]]:
    """The gzip size of what a page load fetched, and what it asked for that the site lacks."""
    import gzip

    total, missing = 0, []
    for url in fetched:
        local = urllib.parse.unquote(urllib.parse.urlparse(url).path).lstrip("/")
        file = site_dir / local / "index.html" if local.endswith("/") or not local else site_dir / local
        if not file.is_file():  # the page asked for something the site does not have: a 404
            missing.append(f"{path}: requested {url}, which is not in the built site")
            continue
        total += len(gzip.compress(file.read_bytes(), compresslevel=6))
    return total, missing


# The pages in shares, one test each, so that the suite's workers check them side by side: most of a
# page's time is waiting for its network to go quiet, not computing. The print page, the whole site on
# one page, is a share of its own: axe takes as long on it as on all the others together.
SHARES = 4
PRINT_PAGE = "print_page"


def built_pages(site_dir: Path) -> list[str]:
    return sorted(p.relative_to(site_dir).parent.as_posix() for p in site_dir.rglob("index.html"))


def share_of(site_dir: Path, share: int) -> list[str]:
    """The pages of `share`: one of SHARES of the pages, or (share == SHARES) the print page."""
    pages = [p for p in built_pages(site_dir) if p != PRINT_PAGE]
    return [PRINT_PAGE] if share == SHARES else pages[share::SHARES]


@pytest.mark.site
def test_the_shares_see_every_page_of_the_site_once(site_dir):
    pages = built_pages(site_dir)
    assert len(pages) > 25 and PRINT_PAGE in pages, pages
    assert sorted(p for share in range(SHARES + 1) for p in share_of(site_dir, share)) == pages


@pytest.mark.site
@pytest.mark.timeout(600)  # about 10 page loads and 20 axe runs: half a minute alone on 2 cores, 2 beside the suite
@pytest.mark.parametrize(
    "share", range(SHARES + 1), ids=lambda share: "print-page" if share == SHARES else f"share-{share + 1}-of-{SHARES}"
)
def test_every_page_in_chromium_weighs_at_most_1_mb_logs_no_error_and_passes_axe_in_light_and_dark(
    browser, served_site, site_dir, share
):
    """One load of each page, with an empty cache, serves all four checks, the dark scheme's included.

    - Weight: what a reader with an empty cache transfers (the HTML, the theme's CSS and JS, the search
      index, images), each file counted at its gzip size, as GitHub Pages serves them: at most 1 MB, and
      1.5 MB for notebook pages, which carry Jupyter's CSS and their plots. The print page, the whole
      site on one page, is held to 1 MB too: what it carries beyond its pages' text is cut (repeated
      scripts and styles, Jupyter's unused rules, the search index).
    - Errors: no console error and no uncaught script error, the print page's included.
    - axe-core (the engine behind Lighthouse's accessibility score, bundled by axe-playwright-python),
      in each colour scheme the reader's system can ask for: no serious or critical violation of its
      WCAG 2 rules. Material follows prefers-color-scheme when a page loads.
      docs/stylesheets/accessible.css holds the fixes axe asked for. On the print page, whose every
      section is a page checked in both schemes already, the colour rules are left out: axe's contrast
      check alone took three minutes there beside the suite."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    pages = share_of(site_dir, share)
    heavy, heaviest, errors, found = [], (0, ""), [], []
    # Material picks the scheme from prefers-color-scheme when a page loads: a browser that asks for dark.
    dark = browser.new_context(color_scheme="dark")
    for path in pages:
        url = served_site + ("" if path == "." else path + "/")
        context = browser.new_context(color_scheme="light")  # an empty cache for each page
        page = context.new_page()
        fetched: list[str] = []
        page.on("requestfinished", lambda r, fetched=fetched: fetched.append(r.url))
        page.on("console", lambda m, path=path: errors.append(f"{path}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e, path=path: errors.append(f"{path}: {e}"))
        # Both requests start when the page's script runs, which can be after the network first goes
        # idle on a slow machine: wait for them, or the weight would depend on the machine.
        searched = 'name="search"' in (site_dir / path / "index.html").read_text()
        with contextlib.ExitStack() as waits:
            for wanted in (SEARCH_INDEX, SEARCH_WORKER) if searched else ():
                waits.enter_context(page.expect_request_finished(lambda r, w=wanted: w.search(r.url), timeout=120_000))
            page.goto(url, wait_until="networkidle")
        if not searched:  # the print page: its search box is gone, and with it what Material's keys open
            assert path == "print_page", f"{path} has no search box"
            for key in ("/", "s", "Escape"):
                page.keyboard.press(key)
            page.evaluate("location.hash = '#lesson-collectives'")  # a navigation resets the search toggle
            page.wait_for_timeout(500)
            assert not [u for u in fetched if SEARCH_INDEX.search(u) or SEARCH_WORKER.search(u)], path
        total, missing = _weight(fetched, site_dir, path)
        heavy += missing
        budget = NOTEBOOK_BUDGET if path.startswith("lab/simulate") else PAGE_BUDGET
        heaviest = max(heaviest, (total, path))
        if total > budget:
            heavy.append(f"{path}: {total} bytes, over {budget}")
        assert page.locator("body").get_attribute("data-md-color-scheme") == "default", path
        if path == PRINT_PAGE:
            found += _axe_findings(page, axe, path, {"rules": {rule: {"enabled": False} for rule in COLOUR_RULES}})
            context.close()
            continue
        found += _axe_findings(page, axe, f"light {path}")
        # The dark scheme is the attributes Material sets on <body> when the reader's system asks for it
        # (docs/stylesheets/accessible.css keys its colours on them): set here on the loaded page, and
        # checked once against a real load in a dark browser.
        if path == ".":
            dark_page = dark.new_page()
            dark_page.goto(url, wait_until="load")
            assert dark_page.locator("body").get_attribute("data-md-color-scheme") == "slate", path
            dark_page.close()
        page.add_style_tag(content="*, *::before, *::after { transition: none !important }")  # colours at once
        page.evaluate("document.body.setAttribute('data-md-color-scheme', 'slate')")
        found += _axe_findings(page, axe, f"dark {path}", {"runOnly": {"type": "rule", "values": COLOUR_RULES}})
        context.close()
    dark.close()
    assert not heavy, heavy
    assert not errors, errors
    assert not found, "\n".join(found)
    assert heaviest[0] > 50_000, heaviest  # the count saw the theme and the search index, not only HTML
