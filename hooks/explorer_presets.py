"""A MkDocs hook: put the scaling explorer's network presets into its page, from the one cost model.
The presets are distdocs.costmodel's, plus α and β fitted to this repository's saved allreduce run,
so the page and `distdocs sim` can never disagree on a preset."""

from __future__ import annotations

import json
from pathlib import Path

from distdocs.costmodel import PRESETS, load_fit

PLACEHOLDER = "<!-- explorer-presets -->"
SAVED_RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "allreduce-cpu.json"


def presets() -> dict:
    fit = load_fit(str(SAVED_RUN), "gloo", world_size=2)
    machine = {
        "name": "this site's build machine (2 CPU ranks, gloo)",
        "alpha": fit.network.alpha,
        "beta": fit.network.beta,
    }
    return {**{k: {"name": n.name, "alpha": n.alpha, "beta": n.beta} for k, n in PRESETS.items()}, "machine": machine}


def on_page_markdown(markdown: str, page, config, files) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    data = json.dumps(presets()).replace("</", "<\\/")
    return markdown.replace(PLACEHOLDER, f'<script type="application/json" id="explorer-presets">{data}</script>')
