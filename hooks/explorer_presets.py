"""A MkDocs hook: put the scaling explorer's network presets into its page, from the one cost model.
The presets are distdocs.calculators.costmodel's, plus α and β fitted to this repository's saved allreduce run,
so the page and `distdocs sim` can never disagree on a preset."""

from __future__ import annotations

import json
from pathlib import Path

from distdocs.arguments import parse_rate
from distdocs.calculators.costmodel import PRESETS
from distdocs.calculators.fits import load_fit

PLACEHOLDER = "<!-- explorer-presets -->"
SAVED_RUN = Path(__file__).resolve().parent.parent / "measurements" / "allreduce-cpu.json"
# The compute-bound model measured at 1 and 2 ranks over loopback and dialled links
# (docs/lesson/gradient-accumulation.md).
THREE_LINKS = Path(__file__).resolve().parent.parent / "measurements" / "prediction-links-cpu.json"
# The scale model's saved sweep (distdocs.bench.emulated), and its backend's allreduces at once.
SCALE_MODEL = Path(__file__).resolve().parent.parent / "measurements" / "emulated-links-cpu.json"
GLOO_LANES = 2  # distdocs.bench.emulated.GLOO_LANES; a test holds the two equal
SAMPLES_PER_RANK = 1024  # distdocs.bench.ddp_steps.MODELS["compute-bound"]; a test holds the two equal
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
    """The saved runs, as the explorer's measured runs: per run, the controls that reproduce its
    workload and network, and its measured speedups as [workers, speedup] pairs per accumulation
    count. First the scale model's ResNet-50 at 1 to 8 workers over each link rate (overlapped, gloo's
    two allreduces at once); then the compute-bound MLP of the three-link run, at 2 ranks (the whole
    1-rank step as its computation, no overlap, as on CPU ranks)."""
    runs = {}
    scale = [r for r in json.loads(SCALE_MODEL.read_text())["records"] if r["case"] == "production" and "speedup" in r]
    for link in sorted({r["link"] for r in scale}, key=parse_rate):
        mine = [r for r in scale if r["link"] == link]
        points = {}
        for r in sorted(mine, key=lambda r: (r["accumulation"], r["workers"])):
            if r["workers"] > 1:
                points.setdefault(str(r["accumulation"]), []).append([r["workers"], r["speedup"]])
        runs[f"scale-{link}"] = {
            "name": f"the scale model's ResNet-50 over {link.replace('mbit', ' Mbit/s')}, measured at 1 to 8 workers",
            "params": mine[0]["gradient_bytes"] / 4,  # fp32 gradients
            "computePerSample": mine[0]["compute_ms"] / 1e3,  # one micro-batch of one "sample"
            "microBatch": 1,
            "overlap": True,
            "concurrent": GLOO_LANES,
            "alpha": mine[0]["alpha_s"],
            "beta": mine[0]["beta_s_per_byte"],
            "points": points,
        }
    records = [r for r in json.loads(THREE_LINKS.read_text())["records"] if r["model"] == "compute-bound"]
    for link in dict.fromkeys(r.get("link", "loopback") for r in records):
        step = {
            (r["world_size"], r["accumulation"]): r["measured_step_s"]
            for r in records
            if r.get("link", "loopback") == link
        }
        one = next(r for r in records if r.get("link", "loopback") == link and r["world_size"] == 1)
        runs[link] = {
            "name": f"the compute-bound MLP over {LINK_NAMES.get(link, link)}, measured at 2 ranks",
            "params": one["gradient_bytes"] / 4,  # fp32 gradients
            "computePerSample": step[1, 1] / SAMPLES_PER_RANK,  # the whole 1-rank step, as the model takes it
            "microBatch": SAMPLES_PER_RANK,
            "overlap": False,
            "concurrent": 1,
            "alpha": one["alpha_s"],
            "beta": one["beta_s_per_byte"],
            # samples per second at 2 ranks over 1: twice the samples, in the 2-rank step's time
            "points": {str(k): [[2, 2 * step[1, k] / step[2, k]]] for n, k in step if n == 2},
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
