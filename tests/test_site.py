"""The built site: `mkdocs build --strict` is clean, nothing loads from another host, and in Chromium
the home page has no console errors, search finds the lesson, and every request stays local."""

from __future__ import annotations

import contextlib
import functools
import html as html_module
import html.parser
import json
import os
import re
import sys
import urllib.parse
from pathlib import Path

import pytest

from browser import CHROMIUM, PRINT_PAGE, launch_chromium, save_pdf, serve_directory
from commands import command_env, run_command
from markdown_fences import REPO

# An asset that the browser loads by itself: scripts, stylesheets, icons, images, frames.
LOADED_URL = re.compile(
    r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["'](https?:)?//"""
    r"""|<link\b(?![^>]*\brel=["']canonical)[^>]*\bhref=["'](https?:)?//""",  # a canonical URL is not loaded
    re.I,
)


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = command_env(gpu=False) | {"NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    result = run_command(f"mkdocs build --strict --site-dir {out}", timeout_s=180, cwd=REPO, env=env)
    assert result.returncode == 0, result.describe()
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("WARNING")]
    assert not warnings, warnings
    return out


@pytest.mark.site
def test_strict_build_has_every_page(site_dir):
    for page in ["index.html", "lesson/index.html", "lesson/data-parallelism/index.html", "testing/index.html"]:
        assert (site_dir / page).is_file(), page


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
    for page in ("index.html", "lesson/data-parallelism/index.html", "recovery/debugging/index.html"):
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


@pytest.fixture
def served_site(site_dir):
    with serve_directory(site_dir) as url:
        yield url


@contextlib.contextmanager
def chromium():
    """Debian's Chromium, headless, through Playwright; closed however the test ends. Skips where
    there is none, except in CI, which must have it."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium at /usr/bin/chromium; `make test` installs it as root")
        pytest.skip("no /usr/bin/chromium; `make test` installs it when run as root")
    with launch_chromium() as browser:
        yield browser


@pytest.mark.site
def test_home_page_and_search_in_chromium(served_site):
    from playwright.sync_api import expect

    requests, errors = [], []
    with chromium() as browser:
        page = browser.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(served_site, wait_until="networkidle")
        expect(page).to_have_title(re.compile("distdocs"))
        expect(page.locator("h1")).to_contain_text("distdocs")

        search = page.locator("input.md-search__input")
        search.focus()  # opens the search; the index loads in a web worker
        # A query typed before the index is ready is not run again, so wait for it first.
        expect(page.locator(".md-search-result__meta")).to_have_text(
            re.compile("Type to start searching"), timeout=15_000
        )
        search.press_sequentially("data parallelism", delay=20)  # real key events, as a reader types
        hit = page.locator(".md-search-result__item a[href*='lesson/data-parallelism/']").first
        expect(hit).to_be_visible(timeout=15_000)

        scheme = page.locator("body").get_attribute("data-md-color-scheme")
        page.keyboard.press("Escape")
        page.locator("form[data-md-component=palette] label:visible").first.click()
        expect(page.locator("body")).not_to_have_attribute("data-md-color-scheme", scheme)
    assert not errors, f"console errors: {errors}"
    foreign = [u for u in requests if not u.startswith(served_site) and not u.startswith(("data:", "blob:"))]
    assert not foreign, f"requests to other hosts: {foreign}"


def _random_cases(count: int) -> list:
    import random

    rng = random.Random(0)
    cases = []
    for _ in range(count):
        work = {
            "params": 10 ** rng.uniform(4, 11),
            "computePerSample": 10 ** rng.uniform(-7, -1),
            "microBatch": rng.randint(1, 4096),
            "accumulation": rng.randint(1, 16),
            "gradientDtype": rng.choice(["fp32", "bf16"]),
            "bucketBytes": rng.choice([2**20, 25 * 2**20, 100 * 2**20]),
            "overlap": rng.random() < 0.5,
        }
        net = {"alpha": 10 ** rng.uniform(-7, -3), "beta": 1 / 10 ** rng.uniform(8, 12)}
        cases.append((work, net, rng.choice(["ring", "tree", "naive"]), [1, 2, 3, 5, 8, 64, 1000]))
    return cases


PAGE_BUDGET, NOTEBOOK_BUDGET = 1_000_000, 1_500_000  # bytes a reader's browser transfers for one page


@pytest.mark.site
def test_every_page_weighs_at_most_1_mb_and_logs_no_error_in_chromium(served_site, site_dir):
    """What a reader with an empty cache transfers for each page: the files Chromium fetches for it
    (the HTML, the theme's CSS and JS, the search index, images), each counted at its gzip size, as
    GitHub Pages serves them. Notebook pages carry Jupyter's CSS and their plots, and get 1.5 MB. The
    same load fails on any console error or uncaught script error, the print page's included."""
    import gzip

    pages = sorted(p.relative_to(site_dir).parent.as_posix() for p in site_dir.rglob("index.html"))
    heavy, heaviest, errors = [], (0, ""), []
    with chromium() as browser:
        for path in pages:
            context = browser.new_context()  # an empty cache for each page
            page = context.new_page()
            fetched: list[str] = []
            page.on("requestfinished", lambda r, fetched=fetched: fetched.append(r.url))
            page.on("console", lambda m, path=path: errors.append(f"{path}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e, path=path: errors.append(f"{path}: {e}"))
            page.goto(served_site + ("" if path == "." else path + "/"), wait_until="networkidle")
            context.close()
            total = 0
            for url in fetched:
                local = urllib.parse.unquote(urllib.parse.urlparse(url).path).lstrip("/")
                file = site_dir / local / "index.html" if local.endswith("/") or not local else site_dir / local
                if not file.is_file():  # the page asked for something the site does not have: a 404
                    heavy.append(f"{path}: requested {url}, which is not in the built site")
                    continue
                total += len(gzip.compress(file.read_bytes(), compresslevel=6))
            budget = NOTEBOOK_BUDGET if path.startswith("lab/simulate") else PAGE_BUDGET
            heaviest = max(heaviest, (total, path))
            if total > budget:
                heavy.append(f"{path}: {total} bytes, over {budget}")
    assert not heavy, heavy
    assert not errors, errors
    assert heaviest[0] > 50_000, heaviest  # the count saw the theme and the search index, not only HTML


@pytest.mark.site
@pytest.mark.timeout(900)  # 80 page loads and axe runs: 3 minutes alone on 2 cores, over 5 beside other tests
def test_every_page_passes_axe_in_light_and_dark_mode(served_site, site_dir):
    """axe-core (the engine behind Lighthouse's accessibility score, bundled by axe-playwright-python)
    on every page, in each colour scheme the reader's system can ask for: no serious or critical
    violation of its WCAG 2 rules. docs/stylesheets/accessible.css holds the fixes it asked for."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    pages = sorted(p.relative_to(site_dir).parent.as_posix() for p in site_dir.rglob("index.html"))
    found = []
    with chromium() as browser:
        for scheme, material_scheme in (("light", "default"), ("dark", "slate")):
            context = browser.new_context(color_scheme=scheme)  # Material follows prefers-color-scheme
            for path in pages:
                page = context.new_page()
                page.goto(served_site + ("" if path == "." else path + "/"), wait_until="networkidle")
                assert page.locator("body").get_attribute("data-md-color-scheme") == material_scheme
                for rule in axe.run(page).response["violations"]:
                    if rule["impact"] in ("serious", "critical"):
                        where = ", ".join(" ".join(node["target"]) for node in rule["nodes"][:3])
                        found.append(f"{scheme} {path or '.'}: {rule['id']} ({len(rule['nodes'])} elements: {where})")
                page.close()
            context.close()
    assert not found, "\n".join(found)
    assert len(pages) > 25, pages  # every page of the site was checked


@pytest.mark.site
def test_scaling_explorer_is_the_python_cost_model_and_redraws_when_a_control_moves(served_site):
    """The page's JavaScript port equals distdocs.costmodel within 1e-9 relative on 300 random
    inputs; moving a control (typing a bandwidth, pressing a key) redraws the curve that the
    Python model gives for the new settings."""
    from distdocs.costmodel import Network, Workload, simulate

    def python(work: dict, net: dict, algorithm: str, sizes: list) -> list:
        w = Workload(
            work["params"],
            work["computePerSample"],
            work["microBatch"],
            work["accumulation"],
            work["gradientDtype"],
            work["bucketBytes"],
            work["overlap"],
        )
        return simulate(w, sizes, Network(net["alpha"], net["beta"]), algorithm)

    cases = _random_cases(300)
    errors = []
    with chromium() as browser:
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        # Its weight is held with every other page's, at gzip sizes, by the page-weight test.
        page.goto(served_site + "lab/scaling-explorer/", wait_until="networkidle")
        got = page.evaluate(
            "cases => cases.map(([w, n, a, s]) => window.distdocsCostModel.simulate(w, s, n, a)"
            ".map(r => [r.step, r.exposed, r.speedup, r.efficiency]))",
            cases,
        )
        for case, js in zip(cases, got):
            for r, values in zip(python(*case), js):
                assert values == pytest.approx([r.step, r.exposed_sync, r.speedup, r.efficiency], rel=1e-9), case

        speedups = lambda: json.loads(page.locator("#explorer-app").get_attribute("data-speedups"))  # noqa: E731
        sizes = [2**i for i in range(11)]  # the page's default: up to 1024 workers
        defaults = {"params": 100e6, "computePerSample": 1e-5, "microBatch": 2048, "accumulation": 1,
                    "gradientDtype": "fp32", "bucketBytes": 25 * 2**20, "overlap": True}  # fmt: skip
        pcie = {"alpha": 10 * 1e-6, "beta": 1 / (25 * 1e9)}  # the first preset, distdocs' pcie4
        assert speedups() == pytest.approx([r.speedup for r in python(defaults, pcie, "ring", sizes)], rel=1e-9)

        page.fill("#explorer-bandwidth", "100")  # four times the bandwidth
        faster = {**pcie, "beta": 1 / (100 * 1e9)}
        assert speedups() == pytest.approx([r.speedup for r in python(defaults, faster, "ring", sizes)], rel=1e-9)

        page.focus("#explorer-accumulation")
        page.keyboard.press("ArrowUp")  # keyboard alone: accumulate 2 micro-batches
        more = {**defaults, "accumulation": 2}
        assert speedups() == pytest.approx([r.speedup for r in python(more, faster, "ring", sizes)], rel=1e-9)
        label = page.locator("#explorer-chart").get_attribute("aria-label")
        assert "at 1024 workers" in label
    assert not errors, errors


@pytest.mark.site
def test_lab_notebook_page_is_executed_and_downloadable(site_dir):
    page = (site_dir / "lab/simulate-data-parallel-sync/index.html").read_text()
    for step in (1, 2, 3):  # executed at build time, with allow_errors: false
        assert f"step {step} self-check passed" in page
    assert "data:image/png;base64" in page  # step 3's plot
    assert 'href="simulate-data-parallel-sync.ipynb"' in page  # the download button
    import nbformat

    notebook = nbformat.read(
        site_dir / "lab/simulate-data-parallel-sync/simulate-data-parallel-sync.ipynb", as_version=4
    )
    nbformat.validate(notebook)
    assert sum(c.cell_type == "code" for c in notebook.cells) >= 10


def _fulfill(html: str, route, _request) -> None:
    route.fulfill(body=html, content_type="text/html")


@pytest.mark.site
def test_lab_notebook_page_looks_the_same_as_with_the_whole_jupyter_stylesheet(served_site, site_dir, tmp_path):
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
    with chromium() as browser:
        for scheme in ("light", "dark"):
            for viewport in ({"width": 412, "height": 915}, {"width": 1280, "height": 900}):
                shots = {}
                for name, html in (("cut", built), ("whole", whole)):
                    context = browser.new_context(color_scheme=scheme, viewport=viewport)
                    page = context.new_page()
                    page.route(served_site + path, functools.partial(_fulfill, html))
                    page.goto(served_site + path, wait_until="networkidle")
                    shots[name] = page.screenshot(full_page=True)
                    context.close()
                if shots["cut"] != shots["whole"]:
                    for name, png in shots.items():
                        (tmp_path / f"{scheme}-{viewport['width']}-{name}.png").write_bytes(png)
                    different.append(f"{scheme}, {viewport['width']} px wide")
    assert not different, f"the page looks different with the whole stylesheet: {different}; see {tmp_path}"


@pytest.mark.site
def test_quiz_grades_a_right_and_a_wrong_answer_in_chromium(served_site):
    """The final quiz, answered in the browser: the seed's first question right, its second wrong.
    Each shows its verdict and the chosen answer's explanation."""
    from playwright.sync_api import expect

    errors = []
    with chromium() as browser:
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(served_site + "quiz/", wait_until="networkidle")
        right, wrong = page.locator("#quiz-0"), page.locator("#quiz-1")
        expect(right.locator(".quiz-question")).to_contain_text("speedup plateaus")
        expect(wrong.locator(".quiz-question")).to_contain_text("Small models that fit on one GPU")

        right.locator("label[for=quiz-0-1]").click()  # gradient synchronization: right
        expect(right.locator("div:has(> #quiz-0-1)")).to_have_class(re.compile(r"\bcorrect\b"))
        expect(right.locator(".quiz-feedback")).to_be_visible()
        expect(right.locator(".quiz-feedback")).to_contain_text("Right. Every step ends with an all_reduce")

        wrong.locator("label[for=quiz-1-0]").click()  # "True": wrong
        expect(wrong.locator("div:has(> #quiz-1-0)")).to_have_class(re.compile(r"\bwrong\b"))
        expect(wrong.locator("div:has(> #quiz-1-1)")).to_have_class(re.compile(r"\bcorrect\b"))  # shown
        expect(wrong.locator(".quiz-feedback")).to_be_visible()
        expect(wrong.locator(".quiz-feedback")).to_contain_text("little computation per step")
    assert not errors, errors


@pytest.mark.fast
def test_the_final_quiz_asks_the_seed_questions_with_their_answers():
    page = (REPO / "docs/quiz.md").read_text()
    assert "The most common reason parallel training speedup plateaus is" in page
    assert "- [x] gradient synchronization" in page
    assert "Small models that fit on one GPU usually benefit the most from data parallelism." in page
    assert "- [x] False" in page and "- [ ] True" in page
    assert page.count("<quiz>") >= 8 and "all of the above" not in page.lower()


@pytest.mark.site
def test_pdf_of_the_print_page_has_every_chapter_on_its_own_page_and_no_code_cut_off(served_site, site_dir, tmp_path):
    """`make pdf`'s PDF, made here the same way. Each page of the site (a chapter) starts a PDF page
    with its title, and every line of every code block on the print page is in the PDF's text, whole.
    Under print styles no code block is wider than its box, so none is clipped, or hidden in a tab."""

    from pypdf import PdfReader

    pdf = tmp_path / "distdocs.pdf"
    with chromium() as browser:
        save_pdf(browser, served_site, pdf)
        context = browser.new_context()
        page = context.new_page()
        page.goto(served_site + PRINT_PAGE, wait_until="networkidle")
        page.emulate_media(media="print")
        overflow = page.evaluate(
            """() => [...document.querySelectorAll('pre > code')]
                .filter(e => e.offsetParent === null || e.scrollWidth > e.clientWidth + 1)
                .map(e => e.textContent.slice(0, 60))"""
        )
        context.close()
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
