"""What the pages say about themselves: the reading times on the home page follow from the pages, every
page of the navigation is in its table, and each route's total is the sum of its pages."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from docexec.fences import DOCS, REPO, classify, parse_fences

pytestmark = pytest.mark.fast  # the test tier: see the testing page

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


# --- one pattern for how a page is checked ---

CHECK_TITLE = re.compile(r'^(?P<indent>\s*)(?P<marker>\?\?\?\+?|!!!) (?P<kind>\w+) "(?P<title>How this[^"]*)"', re.M)
CHECK_TITLES = ("How this was measured", "How this is checked")
# What the site says about its own verification: fine inside the collapsed block, not in the lesson.
SELF_TALK = re.compile(r"make bench|the tests\b|a test (checks|runs)|tests/|test suite|earlier version", re.I)
TEACHING_PAGES = [p for d in ("lesson", "practice", "recovery", "lab") for p in sorted((DOCS / d).glob("*.md"))]


def visible_prose(path) -> str:
    """The page without its fences, collapsed blocks, quizzes and HTML comments: what a reader sees."""
    text = path.read_text()
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    text = re.sub(r"<quiz>.*?</quiz>|<!--.*?-->|<details.*?</details>", "", text, flags=re.S)
    return re.sub(r"^([ \t]*)\?\?\?.*\n(?:\1    .*\n|[ \t]*\n)*", "", text, flags=re.M)


def test_checking_notes_share_one_collapsed_pattern_at_the_end_of_their_section():
    problems = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text().splitlines()
        per_section: dict[str, int] = {}
        section = ""
        for i, line in enumerate(lines):
            if re.match(r"#{2,3} ", line):  # a section, or a subsection
                section = line
            m = CHECK_TITLE.match(line)
            if not m:
                continue
            where = f"{page.relative_to(DOCS)}:{i + 1}"
            if m["marker"] != "???" or m["kind"] != "note" or m["title"] not in CHECK_TITLES:
                problems.append(f'{where}: use ??? note "{CHECK_TITLES[0]}" or "{CHECK_TITLES[1]}"')
            per_section[section] = per_section.get(section, 0) + 1
            if per_section[section] > 1:
                problems.append(f"{where}: a second checking note under {section!r}")
            rest = [ln for ln in lines[i + 1 :] if ln.strip() and not ln.startswith(m["indent"] + " ")]
            if rest and not rest[0].startswith("#"):
                problems.append(f"{where}: not at the end of its section (next: {rest[0][:40]!r})")
    assert not problems, problems


def test_teaching_pages_keep_their_own_checking_inside_the_collapsed_note():
    talk = {
        str(page.relative_to(DOCS)): [m.string[max(0, m.start() - 40) : m.end() + 20] for m in found]
        for page in TEACHING_PAGES
        if (found := list(SELF_TALK.finditer(visible_prose(page))))
    }
    assert not talk, f"the site talking about its own tests outside a collapsed note: {talk}"


def test_the_testing_page_names_every_module_an_example_may_import():
    from docexec.commands import ALLOWED_IN_EXAMPLES

    numbers = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    text = " ".join((DOCS / "testing.md").read_text().split())
    sentence = re.search(r"holds only the (\w+) modules an example may import \(([^)]*)\)", text)
    assert sentence, "docs/testing.md no longer says which distdocs modules an example may import"
    assert sentence.group(1) == numbers[len(ALLOWED_IN_EXAMPLES)]
    assert set(re.findall(r"`(\w+)`", sentence.group(2))) == set(ALLOWED_IN_EXAMPLES)
