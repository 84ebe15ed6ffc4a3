"""The book's routes: one list (mkdocs.yml's `extra.routes`) says each route's pages in order. The
navigation keeps every page on a route or in a section named for what lies on no route, the home page
offers each route with its pages' reading times and their sum, and "Next" at the foot of a route's page
(hooks/routes.py) is the route's next page."""

from __future__ import annotations

import math
import re
import sys
import urllib.parse

import pytest
import yaml

from docexec.fences import DOCS, REPO, classify, parse_fences

sys.path.insert(0, str(REPO / "hooks"))
from routes import Route, route_links, routes  # noqa: E402

CONFIG = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
ROUTES = routes(CONFIG)
SECTIONS = ["Start here", "Make it multi-GPU", "The lesson", "Deep dives", "Operations", "Lab", "Reference", "Appendix"]
OFF_ROUTE_SECTIONS = {"Deep dives", "Operations", "Reference", "Appendix"}  # what lies on no route
HOME = "index.md"
WORDS_PER_MINUTE = 200


def minutes(words: int, commands: int) -> int:
    """Words at 200 a minute, plus a minute for each command to run and its output to read, rounded up
    to 5 minutes."""
    return 5 * math.ceil((words / WORDS_PER_MINUTE + commands) / 5)


def words(path) -> int:
    """A page's words outside code fences and HTML comments; for a jupytext notebook, the words of its
    markdown cells."""
    text = path.read_text()
    if path.suffix == ".py":
        cells = re.split(r"^# %%(.*)$", text, flags=re.M)
        return sum(len(re.findall(r"[A-Za-z0-9]+", b)) for k, b in zip(cells[1::2], cells[2::2]) if "[markdown]" in k)
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    return len(re.findall(r"[A-Za-z0-9]+", re.sub(r"<!--.*?-->", "", text, flags=re.S)))


def page_minutes(page: str) -> int:
    path = DOCS / page
    if path.suffix == ".py":  # a notebook: a minute for each code cell
        cells = re.split(r"^# %%(.*)$", path.read_text(), flags=re.M)
        return minutes(
            words(path), sum(1 for k, b in zip(cells[1::2], cells[2::2]) if "[markdown]" not in k and b.strip())
        )
    return minutes(words(path), sum(1 for f in classify(path) if f.kind == "command"))


def nav_sections() -> dict[str, list[str]]:
    """Each top-level section of the navigation and the page files in it."""

    def files(items) -> list[str]:
        found = []
        for item in items:
            value = item if isinstance(item, str) else next(iter(item.values()))
            found += files(value) if isinstance(value, list) else [value]
        return found

    return {next(iter(s)): files(next(iter(s.values()))) for s in CONFIG["nav"]}


@pytest.mark.fast
def test_the_navigation_is_the_routes_then_what_lies_on_none():
    sections = nav_sections()
    assert list(sections) == SECTIONS
    on_a_route = {page for route in ROUTES for page in route.pages}
    for section, pages in sections.items():
        stray = [p for p in pages if p not in on_a_route and p != HOME and section not in OFF_ROUTE_SECTIONS]
        assert not stray, f"{section}: pages on no route, in a section that is not {sorted(OFF_ROUTE_SECTIONS)}"
    nav = [p for pages in sections.values() for p in pages]
    assert sorted(on_a_route - set(nav)) == [], "a route names a page the navigation does not have"
    assert len(nav) == len(set(nav)), "a page appears twice in the navigation"
    route = {r.name: r for r in ROUTES}
    # within a section, the navigation reads in its route's order
    for section, name in [
        ("Make it multi-GPU", "Make it multi-GPU"),
        ("The lesson", "From zero"),
        ("Lab", "From zero"),
    ]:
        assert sections[section] == [p for p in route[name].pages if p in sections[section]], section


@pytest.mark.fast
def test_a_page_leads_on_to_one_page_whichever_route_it_is_on():
    route_links(ROUTES)  # raises where two routes disagree
    with pytest.raises(ValueError, match="'Next' can be one"):
        route_links([Route("a", ("x.md", "y.md")), Route("b", ("x.md", "z.md"))])


ROUTE = re.compile(
    r"^\*\*(?P<name>[^*:]+): (?P<total>[^*]+)\.\*\*(?P<body>.*?)(?=^\*\*|^Off the routes|^## )", re.M | re.S
)
STEP = re.compile(r"^\d+\. \[[^\]]+\]\(([\w/.-]+)\), (\d+) min$", re.M)


def said_total(total: int) -> set[str]:
    hours, rest = divmod(total, 60)
    if not hours:
        return {f"{total} minutes"}
    unit = "hour" if hours == 1 else "hours"
    return {f"{hours} {unit}"} if not rest else {f"{hours} {unit} {rest} minutes"}


@pytest.mark.fast
def test_the_home_page_offers_each_route_with_its_pages_times_and_their_sum():
    text = (DOCS / HOME).read_text()
    shown = {m["name"]: m for m in ROUTE.finditer(text)}
    assert list(shown) == [r.name for r in ROUTES]
    for route in ROUTES:
        steps = STEP.findall(shown[route.name]["body"])
        assert [page for page, _ in steps] == list(route.pages), f"{route.name}: the home page's list is not the route"
        wrong = {page: (int(m), page_minutes(page)) for page, m in steps if int(m) != page_minutes(page)}
        assert not wrong, f"{route.name}: shown vs computed minutes: {wrong}"
        total = sum(page_minutes(p) for p in route.pages)
        assert shown[route.name]["total"] in said_total(total), f"{route.name}: its pages add up to {total} minutes"


@pytest.mark.fast
def test_the_home_page_is_at_most_500_words_of_prose():
    """Everything outside code fences and HTML comments, the route lists included."""
    assert words(DOCS / HOME) <= 500


def footer_link(html: str, direction: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" class="md-footer__link md-footer__link--{direction}"', html)
    return found[1] if found else None


def site_page(page: str) -> str:
    """The built page's folder, as MkDocs writes it (use_directory_urls)."""
    return "" if page == HOME else re.sub(r"(/index)?\.(md|py)$", "/", page)


@pytest.mark.site
def test_next_at_the_foot_of_a_routes_page_is_the_routes_next_page(site_dir):
    for page, (_, after) in route_links(ROUTES).items():
        if not after:
            continue
        html = (site_dir / site_page(page) / "index.html").read_text()
        link = footer_link(html, "next")
        assert link, f"{page}: no Next"
        target = urllib.parse.urljoin("/" + site_page(page), link)
        assert target == "/" + site_page(after), f"{page}: Next goes to {target}, the route to {after}"


# An abbreviation: capitals (and digits), perhaps a plural s; ZeRO is one too. Not one that ends a hyphenated
# name (Megatron-LM). Those every reader of a PyTorch script knows need no hover text; the names of
# products and papers are names, not abbreviations.
ABBREVIATION = re.compile(r"(?<![-\w])(?:ZeRO|[A-Z][A-Z0-9]+)s?\b")
KNOWN = {"GPU", "GPUs", "CPU", "CPUs", "GB", "MB", "KB", "TB", "TCP", "IP", "API", "APIs", "CUDA", "CI"}
NAMES = {"NVIDIA", "H100", "V100", "V100s", "PCI", "SIG", "SXM", "NDR", "HGX", "GB200", "NVL72", "ZBV", "SDEs"}
NAMES |= {"SIGTERM", "SIGKILL", "USR1"}  # signals, by their names


def route_prose(page: str) -> str:
    """What a reader reads of a page: its words outside code, comments, quizzes and link targets."""
    path = DOCS / page
    text = path.read_text()
    if path.suffix == ".py":
        cells = re.split(r"^# %%(.*)$", text, flags=re.M)
        text = "\n".join(b for k, b in zip(cells[1::2], cells[2::2]) if "[markdown]" in k)
    else:
        for fence in parse_fences(path):
            text = text.replace(fence.body, "")
    return re.sub(r"<!--.*?-->|<quiz>.*?</quiz>|`[^`\n]*`|\]\([^)]*\)|<[^>]+>", " ", text, flags=re.S)


@pytest.mark.fast
def test_every_abbreviation_on_a_route_has_hover_text():
    """The glossary's hover texts (includes/abbreviations.md) show on every page, so a reader of any
    route meets no abbreviation undefined."""
    hovers = set(re.findall(r"^\*\[([^\]]+)\]: ", (REPO / "includes/abbreviations.md").read_text(), re.M))
    missing = {}
    for route in ROUTES:
        for page in route.pages:
            for abbreviation in ABBREVIATION.findall(route_prose(page)):
                if abbreviation not in hovers | KNOWN | NAMES:
                    missing.setdefault(abbreviation, page)
    assert not missing, f"abbreviations on a route without hover text (first seen on): {missing}"
