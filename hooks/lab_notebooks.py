"""A MkDocs hook for the lab notebooks (jupytext .py files under docs/lab/), which mkdocs-jupyter renders:

- write each notebook as an .ipynb next to its page, where the page's download button points. The
  notebook is saved without outputs: a reader runs it on their own machine, and step 3 measures it;
- give the notebook's code cells a tabindex, so that a keyboard can scroll them;
- drop nbconvert's Mermaid loader, a script that would import Mermaid from a CDN if a cell drew a
  diagram: the site loads nothing from another host. A notebook with a Mermaid diagram fails the
  build instead (draw it as an SVG, as the pages do);
- keep only the part of JupyterLab's stylesheet that can style the page. mkdocs-jupyter inlines all
  of it, 575 KB, made for the whole JupyterLab application (menus, file browser, dialogs); a phone
  spends most of the page's load parsing and matching it. A rule is dropped when its selectors name
  a class or id that no element of the page carries, or put `:root`, `html` or `body` inside an
  element, which never matches. Classes Material's script adds (`md-*`) count as present. The kept
  style element says what it was cut from, so that a test can render the page with the whole file
  and compare."""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import tinycss2
from bs4 import BeautifulSoup

JUPYTER_CSS = Path(__import__("mkdocs_jupyter").__file__).parent / "templates/mkdocs_html/assets/index.css"
SIMPLE_SELECTOR = re.compile(r"([.#])(-?[_a-zA-Z][\w-]*)")
SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>\n?", re.S)
NEVER_INSIDE = re.compile(r"[\s>+~](?::root|html|body)\b")  # the document's root or body below an element


def on_post_build(config, **kwargs) -> None:
    docs, site = Path(config["docs_dir"]), Path(config["site_dir"])
    for source in sorted((docs / "lab").glob("*.py")):
        target = site / "lab" / source.stem / f"{source.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(source), target, fmt="ipynb")


def on_post_page(output: str, page, config) -> str:
    if not page.file.src_uri.startswith("lab/") or not page.file.src_uri.endswith(".py"):
        return output
    return prune_jupyter_css(drop_mermaid_loader(focusable_cells(output), page.file.src_uri))


def focusable_cells(html: str) -> str:
    """A notebook's code cells scroll sideways; a keyboard reaches them only with a tabindex, as
    Material gives its own code blocks (axe-core's scrollable-region-focusable rule)."""
    return html.replace('<div class="highlight-ipynb ', '<div tabindex="0" class="highlight-ipynb ')


def drop_mermaid_loader(html: str, name: str) -> str:
    if 'class="jp-Mermaid' in html:
        raise RuntimeError(f"{name}: a Mermaid diagram would load Mermaid from a CDN; draw it as an SVG file")
    return SCRIPT.sub(lambda script: "" if "mermaid.esm.min.mjs" in script[0] else script[0], html)


def prune_jupyter_css(html: str) -> str:
    """`html` with JupyterLab's inlined stylesheet cut down to the rules that can match it."""
    whole = JUPYTER_CSS.read_text()
    element = f'<style type="text/css">\n{whole.strip()}\n</style>'
    if element not in html:
        start = html.find('<style type="text/css">\n@charset')
        raise RuntimeError(f"mkdocs-jupyter no longer inlines {JUPYTER_CSS} as this hook expects (near {start})")
    soup = BeautifulSoup(html, "html.parser")
    present = {"." + c for tag in soup.find_all(class_=True) for c in tag["class"]}
    present |= {"#" + tag["id"] for tag in soup.find_all(id=True)}
    kept = _matching_rules(whole, present)
    return html.replace(element, f'<style type="text/css" data-cut-from="{JUPYTER_CSS.name}">\n{kept}\n</style>')


def _can_match(selector: str, present: set[str]) -> bool:
    if NEVER_INSIDE.search(selector.strip()):
        return False
    # Inside :not(), :is(), :where(), :has() and [attribute] a name need not be present.
    selector = re.sub(r":(?:not|is|where|has)\([^()]*\)|\[[^\]]*\]", "", selector)
    names = {kind + name for kind, name in SIMPLE_SELECTOR.findall(selector)}
    return all(n in present or n.startswith(".md-") for n in names)


def _selectors(prelude: list) -> list[str]:
    """A rule's selector list, split at its top-level commas (those inside :not(...) stay)."""
    selectors, current = [], []
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            selectors.append(tinycss2.serialize(current))
            current = []
        else:
            current.append(token)
    return [*selectors, tinycss2.serialize(current)]


def _matching_rules(css: str, present: set[str]) -> str:
    kept = []
    for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
        if rule.type == "qualified-rule":
            if any(_can_match(s, present) for s in _selectors(rule.prelude)):
                kept.append(rule.serialize())
        elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports") and rule.content:
            inner = _matching_rules(tinycss2.serialize(rule.content), present)
            if inner:
                kept.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{inner}}}")
        else:
            kept.append(rule.serialize())
    return "".join(kept)
