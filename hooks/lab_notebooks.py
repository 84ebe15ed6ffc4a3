"""A MkDocs hook: write every lab notebook (a jupytext .py file under docs/lab/) as an .ipynb next to
its page, where the page's download button points. The notebook is saved without outputs: a
reader runs it on their own machine, and step 3 measures that machine."""

from __future__ import annotations

from pathlib import Path

import jupytext


def on_post_build(config, **kwargs) -> None:
    docs, site = Path(config["docs_dir"]), Path(config["site_dir"])
    for source in sorted((docs / "lab").glob("*.py")):
        target = site / "lab" / source.stem / f"{source.stem}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(jupytext.read(source), target, fmt="ipynb")


def on_post_page(output: str, page, config) -> str:
    """A notebook's code cells scroll sideways; a keyboard reaches them only with a tabindex, as
    Material gives its own code blocks (axe-core's scrollable-region-focusable rule)."""
    if not page.file.src_uri.startswith("lab/") or not page.file.src_uri.endswith(".py"):
        return output
    return output.replace('<div class="highlight-ipynb ', '<div tabindex="0" class="highlight-ipynb ')
