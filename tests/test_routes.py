"""The book's routes: one list (mkdocs.yml's `extra.routes`) says each route's pages in order. The
navigation keeps every page on a route or in a section named for what lies on no route, the home page
offers each route with its pages' reading times and their sum, and "Next" at the foot of a route's page
(hooks/routes.py) is the route's next page."""

from __future__ import annotations

import re
import sys
import urllib.parse

import pytest
import yaml

from docexec.fences import DOCS, REPO, parse_fences

sys.path.insert(0, str(REPO / "hooks"))
import reading_time  # noqa: E402
from reading_time import command_key, command_times, page_parts  # noqa: E402
from routes import ROUTES_MARKER, Route, route_links, route_list, routes  # noqa: E402

CONFIG = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
ROUTES = routes(CONFIG)
SECTIONS = ["Start here", "Make it multi-GPU", "The lesson", "Deep dives", "Operations", "Lab", "Reference", "Appendix"]
OFF_ROUTE_SECTIONS = {"Deep dives", "Operations", "Reference", "Appendix"}  # what lies on no route
HOME = "index.md"


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


ROUTE = re.compile(r"^\*\*(?P<name>[^*:]+): (?P<total>[^*]+)\.\*\*(?P<body>.*?)(?=^\*\*|\Z)", re.M | re.S)
STEP = re.compile(r"^\d+\. \[[^\]]+\]\(([\w/.-]+)\), (\d+) min$", re.M)
# What each route may take by the reading rule: a reader short on time has twenty minutes, an engineer
# an afternoon's first hour and a quarter, a student from zero four hours.
# The multi-GPU route answers the errors and questions readers bring on the pages where they land;
# 90 minutes is its cap.
BUDGET_MINUTES = {"Short on time": 20, "Make it multi-GPU": 90, "From zero": 240}


@pytest.mark.fast
def test_the_home_page_offers_each_route_with_its_pages_times_by_the_rule_and_their_sum():
    assert ROUTES_MARKER in (DOCS / HOME).read_text(), "the home page has no place for the routes"
    times = command_times()
    shown = {m["name"]: m for m in ROUTE.finditer(route_list(CONFIG, times))}
    assert list(shown) == [r.name for r in ROUTES]
    for route in ROUTES:
        steps = STEP.findall(shown[route.name]["body"])
        assert [page for page, _ in steps] == list(route.pages), f"{route.name}: the list is not the route"
        minutes = {page: reading_time.page_minutes(page, times) for page in route.pages}
        assert [int(m) for _, m in steps] == list(minutes.values())
        total = sum(minutes.values())
        assert shown[route.name]["total"] == reading_time.said(total)
        assert total <= BUDGET_MINUTES[route.name], f"{route.name}: {total} minutes by the rule: {minutes}"


@pytest.mark.fast
def test_every_command_a_route_counts_has_its_measured_run_time():
    """A command with no time in measurements/command-times.json would count as instant: run
    `python -m tools.command_times measurements/command-times.json`."""
    times = command_times()
    missing = [
        command_key(page, command)
        for route in ROUTES
        for page in route.pages
        for command in page_parts(page)["timed_commands"]
        if command_key(page, command) not in times
    ]
    assert not missing, f"no measured run time, run python -m tools.command_times: {missing}"


@pytest.mark.fast
def test_the_reading_rule_counts_prose_code_exercises_quizzes_and_commands(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    prose = " ".join(["word"] * 394)  # with the headings' 6 words, 2 minutes
    quiz = "<quiz>\nWhy?\n- [x] yes\n> Right.\n</quiz>\n"
    page.write_text(
        f"# A page\n\n{prose}\n\n```python\n"
        + "x = 1\n" * 20  # 1 minute
        + "```\n\n### Exercise 1: try it\n\n"  # 5 minutes
        + "```bash\ndistdocs doctor\n```\n\n"  # 1 minute, and its 120 s run: 2 more
        + '??? note "How this was measured"\n\n    '
        + " ".join(["folded"] * 2000)
        + "\n\n"  # not counted
        + quiz * 2  # 2 minutes
    )
    monkeypatch.setattr(reading_time, "DOCS", tmp_path)
    parts = page_parts("page.md")
    assert (parts["words"], parts["code_lines"], parts["exercises"], parts["quiz_questions"]) == (400, 20, 1, 2)
    assert parts["commands"] == ["distdocs doctor"]
    assert reading_time.page_minutes("page.md", {command_key("page.md", "distdocs doctor"): 120}) == 13


@pytest.mark.fast
def test_the_home_page_is_at_most_500_words_of_prose():
    """Everything outside code fences and HTML comments, the route lists included."""
    text = (DOCS / HOME).read_text().replace(ROUTES_MARKER, route_list(CONFIG, {}))
    assert len(re.findall(r"[A-Za-z0-9]+", re.sub(r"<!--.*?-->|\]\([^)]*\)", " ", text, flags=re.S))) <= 500


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
NAMES = {"NVIDIA", "H100", "V100", "V100s", "PCI", "SIG", "SXM", "NDR", "HGX", "DGX", "GB200", "NVL72", "ZBV", "SDEs"}
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


@pytest.mark.fast
def test_no_route_page_carries_the_sites_own_machinery():
    """How a page is checked is the testing appendix's table (hooks/checks_table.py), and the GPU
    status is Set up's; a page on a route teaches."""
    for route in ROUTES:
        for page in route.pages:
            text = (DOCS / page).read_text()
            assert '"How this is checked"' not in text, f"{page}: a checking note; the testing appendix's table has it"
            assert "No GPU run has produced" not in text, f"{page}: the GPU status is said once, on Set up"


@pytest.mark.fast
def test_the_testing_appendix_lists_every_page_with_the_tests_that_name_it():
    sys.path.insert(0, str(REPO / "hooks"))
    from checks_table import CHECKS_MARKER, checks_by_page, checks_table

    assert CHECKS_MARKER in (DOCS / "appendix/testing.md").read_text()
    found = checks_by_page(CONFIG["nav"])
    assert found["multi-gpu/launch-on-several-nodes.md"] == ["test_multi_node.py", "test_slurm.py"]
    assert "test_memory.py" in found["lesson/choosing-a-strategy.md"]
    table = checks_table(CONFIG["nav"])
    assert all(f"](../{page})" in table for page in found if page != HOME)
