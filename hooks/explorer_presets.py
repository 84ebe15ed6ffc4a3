"""A MkDocs hook: put the scaling explorer's network presets into its page, from the one cost model.
The presets are distdocs.costmodel's, plus α and β fitted to this repository's saved allreduce run,
so the page and `distdocs sim` can never disagree on a preset."""

from __future__ import annotations

import json
from pathlib import Path

from distdocs.costmodel import PRESETS, load_fit

PLACEHOLDER = "<!-- explorer-presets -->"
SAVED_RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "allreduce-cpu.json"
# The compute-bound model measured at 1 and 2 ranks over loopback and dialled links
# (docs/lesson/gradient-accumulation.md).
THREE_LINKS = Path(__file__).resolve().parent.parent / "benchmarks" / "prediction-links-cpu.json"
SAMPLES_PER_RANK = 1024  # distdocs.bench.scaling.MODELS["compute-bound"]; a test holds the two equal
LINK_NAMES = {"loopback": "loopback, one machine", "1gbit": "a 1 Gbit/s link", "100mbit": "a 100 Mbit/s link"}


def presets() -> dict:
    fit = load_fit(str(SAVED_RUN), "gloo", world_size=2)
    machine = {
        "name": "this site's build machine (2 CPU ranks, gloo)",
        "alpha": fit.network.alpha,
        "beta": fit.network.beta,
    }
    return {**{k: {"name": n.name, "alpha": n.alpha, "beta": n.beta} for k, n in PRESETS.items()}, "machine": machine}


def measured_runs() -> dict:
    """The saved three-link run, as the explorer's measured runs: per link, the controls that
    reproduce its workload and network (the 1-rank computation per sample, its gradient, the link's
    α and β, no overlap), and the speedup measured at 2 ranks for each accumulation count."""
    records = [r for r in json.loads(THREE_LINKS.read_text())["records"] if r["model"] == "compute-bound"]
    runs = {}
    for link in dict.fromkeys(r.get("link", "loopback") for r in records):
        step = {
            (r["world_size"], r["accumulation"]): r["measured_step_s"]
            for r in records
            if r.get("link", "loopback") == link
        }
        one = next(r for r in records if r.get("link", "loopback") == link and r["world_size"] == 1)
        runs[link] = {
            "name": f"the compute-bound MLP over {LINK_NAMES.get(link, link)}, measured",
            "params": one["gradient_bytes"] / 4,  # fp32 gradients
            "computePerSample": step[1, 1] / SAMPLES_PER_RANK,  # the whole 1-rank step, as the model takes it
            "microBatch": SAMPLES_PER_RANK,
            "alpha": one["alpha_s"],
            "beta": one["beta_s_per_byte"],
            # samples per second at 2 ranks over 1: twice the samples, in the 2-rank step's time
            "speedups": {str(k): 2 * step[1, k] / step[2, k] for n, k in step if n == 2},
        }
    return runs


def on_page_markdown(markdown: str, page, config, files) -> str:
    if PLACEHOLDER not in markdown:
        return markdown
    data = json.dumps(presets()).replace("</", "<\\/")
    runs = json.dumps(measured_runs()).replace("</", "<\\/")
    return markdown.replace(
        PLACEHOLDER,
        f'<script type="application/json" id="explorer-presets">{data}</script>\n'
        f'<script type="application/json" id="explorer-runs">{runs}</script>',
    )
