"""A MkDocs hook: "Next" and "Previous" at the foot of a page follow the reader's route.

The routes are one list in mkdocs.yml (`extra.routes`): each a name and its pages in reading order.
MkDocs links every page to its neighbours in the navigation; a route that leaves its section (the
from-zero route goes from the overview to the lesson, and through the lab) needs its own links. This
hook replaces them for every page that a route leads on from, and leaves the navigation's order
everywhere else. A page that two routes lead on to different pages is an error: the build stops.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    name: str
    pages: tuple[str, ...]


def routes(config) -> list[Route]:
    """The routes of a loaded MkDocs config, or of a dict read from mkdocs.yml."""
    extra = config["extra"] if "extra" in config else {}
    return [Route(r["name"], tuple(r["pages"])) for r in extra.get("routes", [])]


def route_links(all_routes: list[Route]) -> dict[str, tuple[str | None, str | None]]:
    """For every page a route leads on from or arrives at: (previous page, next page) on its route.
    Raises ValueError where two routes disagree."""
    nexts: dict[str, str] = {}
    previous: dict[str, str | None] = {}
    for route in all_routes:
        for before, after in zip(route.pages, route.pages[1:]):
            if nexts.setdefault(before, after) != after:
                raise ValueError(f"{before}: the routes go on to {nexts[before]} and to {after}; 'Next' can be one")
            # where two routes arrive at a page from different ones, "Previous" keeps the navigation's
            previous[after] = before if previous.get(after, before) == before else None
    return {page: (previous.get(page), nexts.get(page)) for page in {*nexts, *previous}}


def on_nav(nav, config, files):
    pages = {page.file.src_uri: page for page in nav.pages}
    for uri, (before, after) in route_links(routes(config)).items():
        missing = [p for p in (uri, before, after) if p and p not in pages]
        if missing:
            raise ValueError(f"a route names pages that are not in the navigation: {missing}")
        if after:
            pages[uri].next_page = pages[after]
        if before:
            pages[uri].previous_page = pages[before]
    return nav
