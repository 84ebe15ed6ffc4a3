"""What the pages say about themselves: the reading times on the home page follow from the pages."""

from __future__ import annotations

import math
import re

from markdown_fences import DOCS, classify, parse_fences

WORDS_PER_MINUTE = 200
ROW = re.compile(r"^\| \[[^\]]+\]\(((?:lesson|practice)/[\w-]+\.md)\) \|.*\| (\d+) min \|$", re.M)


def reading_minutes(path) -> int:
    """Prose words at 200 a minute, plus a minute for each command to run and its output to read,
    rounded up to 5 minutes."""
    text = path.read_text()
    for fence in parse_fences(path):
        text = text.replace(fence.body, "")
    words = len(re.findall(r"[A-Za-z0-9]+", text))
    commands = sum(1 for f in classify(path) if f.kind == "command")
    return 5 * math.ceil((words / WORDS_PER_MINUTE + commands) / 5)


def test_home_page_times_follow_from_the_pages():
    rows = ROW.findall((DOCS / "index.md").read_text())
    pages = [*(DOCS / "lesson").glob("*.md"), *(DOCS / "practice").glob("*.md")]
    assert sorted(page for page, _ in rows) == sorted(str(p.relative_to(DOCS)) for p in pages), "a row per page"
    wrong = {
        page: (int(shown), reading_minutes(DOCS / page))
        for page, shown in rows
        if int(shown) != reading_minutes(DOCS / page)
    }
    assert not wrong, f"shown vs computed minutes: {wrong}"
