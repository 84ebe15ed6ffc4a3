"""A MkDocs hook: "Next" and "Previous" at the foot of a page follow the reader's route.

The routes are one list in mkdocs.yml (`extra.routes`): each a name and its pages in reading order.
MkDocs links every page to its neighbours in the navigation; a route that leaves its section (the
from-zero route goes from the overview to the lesson, and through the lab) needs its own links. This
hook replaces them for every page that a route leads on from, and leaves the navigation's order
everywhere else. A page that two routes lead on to different pages is an error: the build stops.

The home page's `<!-- routes -->` line becomes the list of routes: each with what it is for, its
pages and their minutes by the reading rule (hooks/reading_time.py), and their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from reading_time import page_minutes, said

ROUTES_MARKER = "<!-- routes -->"


@dataclass(frozen=True)
class Route:
    name: str
    pages: tuple[str, ...]
    says: str = ""  # what the route is for, in a sentence or two


def routes(config) -> list[Route]:
    """The routes of a loaded MkDocs config, or of a dict read from mkdocs.yml."""
    extra = config["extra"] if "extra" in config else {}
    return [Route(r["name"], tuple(r["pages"]), r.get("says", "")) for r in extra.get("routes", [])]


def nav_titles(nav) -> dict[str, str]:
    """Each page file of the navigation (mkdocs.yml's `nav`) and its title there."""
    titles = {}
    for item in nav:
        for title, value in item.items() if isinstance(item, dict) else [("", item)]:
            titles |= nav_titles(value) if isinstance(value, list) else {value: title}
    return titles


def route_list(config, times: dict[str, float] | None = None) -> str:
    """The routes as the home page offers them, in Markdown; links relative to the home page."""
    titles, blocks = nav_titles(config["nav"]), []
    for route in routes(config):
        minutes = [page_minutes(page, times) for page in route.pages]
        steps = [f"{i}. [{titles[p]}]({p}), {m} min" for i, (p, m) in enumerate(zip(route.pages, minutes), 1)]
        blocks.append(f"**{route.name}: {said(sum(minutes))}.** {route.says}\n\n" + "\n".join(steps))
    return "\n\n".join(blocks)


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


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "index.md":
        return markdown.replace(ROUTES_MARKER, route_list(config))
    return markdown


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
