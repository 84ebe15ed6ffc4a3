"""The test tiers: every test carries exactly one of fast, processes and site, or the collection fails;
the order the tests are handed out in; and `--page`, which keeps what one page shows and the fast tier."""

from __future__ import annotations

import os

import pytest

TIERS = ("fast", "processes", "site")  # pyproject.toml says what each means; the testing page, why


def pytest_addoption(parser):
    parser.addoption(
        "--page",
        metavar="docs/PAGE.md",
        help="run what one page shows (its inline fences, commands, output blocks and the examples it "
        "includes) and the fast tier, and nothing else: `make test-page PAGE=...`",
    )


def pytest_collection_modifyitems(config, items):
    """Every test is in exactly one tier, or the collection fails. The pages' inline python fences
    (collected by pytest-markdown-docs from docs/) are small in-process blocks: the fast tier. Then the
    site's tests are put early (after the first round), and with --page only what the page shows and
    the fast tier are kept."""
    untiered = []
    for item in items:
        if item.nodeid.startswith("docs/"):
            item.add_marker(pytest.mark.fast)
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        if len(tiers) != 1 and item.get_closest_marker("upstream") is None:
            untiered.append(f"{item.nodeid}: {', '.join(sorted(tiers)) or 'no tier'}")
    # The site's tests go out early, after the first round (the order is otherwise pytest's). They hold
    # some of the run's longest waits, for the one site build (which plugins/background.py starts as
    # the session begins) and then in Chromium; handed out last, they could end the run late. Under
    # make test's --maxschedchunk 1 each worker takes two tests and then one at a time, in this order:
    # the first round is other tests, so that the workers are busy while the site is being built.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    site = [item for item in items if item.get_closest_marker("site")]
    rest = [item for item in items if not item.get_closest_marker("site")]
    items[:] = rest[: 2 * workers] + site + rest[2 * workers :]
    if config.getoption("--page"):
        keep = [item for item in items if item.get_closest_marker("fast") or shows(config.getoption("--page"), item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if untiered:
        raise pytest.UsageError(
            "every test needs exactly one tier marker, " + " or ".join(TIERS) + ":\n  " + "\n  ".join(untiered)
        )


def shows(page: str, item) -> bool:
    """Whether `item` runs what `page` shows: a command, output or excerpt of the page (test_docs.py's
    tests, whose ids name the page and line), one of its inline fences, or an example it includes."""
    from docexec.fences import REPO, classify

    page = page.removeprefix("./")
    if f"[{page}:" in item.nodeid or item.nodeid.startswith(f"{page}::"):
        return True
    if "test_example_passes_its_self_check[" in item.nodeid:
        included = {t.split(":")[0] for f in classify(REPO / page) for t in f.includes}
        example = item.nodeid.split("[", 1)[1].rstrip("]").removeprefix("examples/")
        return example in included
    return False
