"""What the pages say about themselves: the reading times on the home page follow from the pages, every
page of the navigation is in its table, and each route's total is the sum of its pages."""

from __future__ import annotations

import math
import re

import yaml

from markdown_fences import DOCS, REPO, classify, parse_fences

WORDS_PER_MINUTE = 200
ROW = re.compile(r"^\| \[[^\]]+\]\(([\w/.-]+)\) \|.*\| (\d+ min|to look up) \|$", re.M)
ROUTE = re.compile(
    r"^\*\*(?P<name>[^*:]+): (?P<total>[^*]+)\.\*\*(?P<body>.*?)(?=^\*\*|^The practice|^## )", re.M | re.S
)
STEP = re.compile(r"^\d+\. \[[^\]]+\]\(([\w/.-]+)(?:#[\w-]+)?\), (\d+) min$", re.M)
LAB = "lab/simulate-data-parallel-sync.py"


def minutes(words: int, commands: int) -> int:
    """Words at 200 a minute, plus a minute for each command to run and its output to read, rounded up
    to 5 minutes."""
    return 5 * math.ceil((words / WORDS_PER_MINUTE + commands) / 5)


def reading_minutes(path) -> int:
    text = path.read_text()
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    words = len(re.findall(r"[A-Za-z0-9]+", text))
    return minutes(words, sum(1 for f in classify(path) if f.kind == "command"))


def notebook_minutes(path, before: str | None = None) -> int:
    """The same for a jupytext notebook: the words of its markdown cells, and a minute for each code
    cell; up to the line `before` when given."""
    text = path.read_text()
    if before:
        text = text.split(before)[0]
    cells = re.split(r"^# %%(.*)$", text, flags=re.M)
    kinds, bodies = cells[1::2], cells[2::2]
    words = sum(len(re.findall(r"[A-Za-z0-9]+", b)) for k, b in zip(kinds, bodies) if "[markdown]" in k)
    code = sum(1 for k, b in zip(kinds, bodies) if "[markdown]" not in k and b.strip())
    return minutes(words, code)


def page_minutes(page: str, anchor_text: str = "") -> int:
    if page == LAB:
        return notebook_minutes(DOCS / LAB, "# ## Step 3" if "steps 1 and 2" in anchor_text else None)
    return reading_minutes(DOCS / page)


def nav_pages() -> list[str]:
    """Every page file the navigation lists, home page aside."""
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    found = []

    def walk(items):
        for item in items:
            value = item if isinstance(item, str) else next(iter(item.values()))
            if isinstance(value, list):
                walk(value)
            elif value != "index.md":
                found.append(value)

    walk(config["nav"])
    return found


def test_every_page_of_the_navigation_is_in_the_home_page_table_with_its_time():
    rows = dict(ROW.findall((DOCS / "index.md").read_text()))
    assert sorted(rows) == sorted(set(nav_pages())), "the table lists every page of the navigation, once"
    wrong = {
        page: (shown, page_minutes(page))
        for page, shown in rows.items()
        if shown != "to look up" and int(shown.split()[0]) != page_minutes(page)
    }
    assert not wrong, f"shown vs computed minutes: {wrong}"
    assert {p for p, shown in rows.items() if shown == "to look up"} == {"reference/cli.md", "reference/api.md"}


def test_each_route_lists_its_pages_times_and_their_sum():
    text = (DOCS / "index.md").read_text()
    routes = {m.group("name"): m for m in ROUTE.finditer(text)}
    assert len(routes) == 3, list(routes)
    for name, m in routes.items():
        steps = [
            (page, int(shown), line) for line in m.group("body").splitlines() for page, shown in STEP.findall(line)
        ]
        assert steps, f"{name}: no pages"
        for page, shown, line in steps:
            assert shown == page_minutes(page, line), (
                f"{name}: {page} shows {shown} min, not {page_minutes(page, line)}"
            )
        total = sum(shown for _, shown, _ in steps)
        hours, rest = divmod(total, 60)
        said = m.group("total")
        expected = {f"{total} minutes"} | (
            {f"{hours} hours {rest} minutes", f"{hours} hour {rest} minutes"} if hours else set()
        )
        assert said in expected, f"{name}: says {said!r}, its pages add up to {total} minutes"


def prose_words(path) -> int:
    """Words outside code fences and quizzes."""
    text = path.read_text()
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    return len(re.findall(r"[A-Za-z0-9]+", re.sub(r"<quiz>.*?</quiz>", "", text, flags=re.S)))


def test_the_first_lesson_page_stays_lean():
    """The first real page teaches the idea, the by-hand step, DDP and the setup; its internals live on
    their own page. 1,500 words of prose at most."""
    assert prose_words(DOCS / "lesson/data-parallelism.md") <= 1500


PLURALS = {"ranks": "rank", "buckets": "bucket", "shards": "shard", "collectives": "collective",
           "placements": "placement", "micro-batches": "micro-batch"}  # fmt: skip


def test_every_glossary_term_has_a_hover_definition_and_the_hovers_name_only_glossary_terms():
    terms = {t.lower() for t in re.findall(r"^\*\*([^*\n]+)\*\*$", (DOCS / "glossary.md").read_text(), re.M)}
    hovers = re.findall(r"^\*\[([^\]]+)\]: .+$", (REPO / "includes/abbreviations.md").read_text(), re.M)
    defined = {PLURALS.get(h, h).lower() for h in hovers}
    assert defined <= terms, f"hovers for words the glossary does not define: {defined - terms}"
    assert terms - defined == {"all_reduce"}, f"glossary terms without a hover: {terms - defined - {'all_reduce'}}"
