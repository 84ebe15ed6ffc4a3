"""docs/deep-dives/activation-recomputation.md: the memory calculator's three settings of recomputation
reproduce Korthikanti et al. 2022 (Table 2) and match, byte for byte, what PyTorch keeps for backward
in the page's example (its one launch is shared with test_docs.py and test_examples.py)."""

from __future__ import annotations

import re

import pytest

from distdocs.calculators.memory import RECOMPUTE, activation_bytes, layer_activation_terms

from docexec.fences import REPO

SCRIPT = "examples/recomputation/step01_three_settings.py"
COMMAND = f"torchrun --standalone --nproc_per_node=2 {SCRIPT}"
HEADER = re.compile(r"^(\d+) GPT layers, s=(\d+) tokens, b=(\d+), h=(\d+), a=(\d+) heads, on cpu$", re.M)
ROW = re.compile(r"^(none|selective|full)\s+([\d,]+) B\s+([\d,]+) B\s+([\d.]+)x$", re.M)

# The paper's models (Table 3): heads, hidden size, tensor-parallel size; all at s = 2048.
PAPER_MODELS = {"22B": (64, 6144, 8), "175B": (96, 12288, 8), "530B": (128, 20480, 8), "1T": (160, 25600, 8)}


@pytest.mark.fast
@pytest.mark.parametrize("model", PAPER_MODELS)
@pytest.mark.parametrize("micro_batch", [1, 4])
def test_the_terms_add_up_to_each_row_of_the_papers_table_2(model, micro_batch):
    a, h, t = PAPER_MODELS[model]
    s, b = 2048, micro_batch
    sbh = s * b * h

    def total(**kwargs) -> float:
        return sum(layer_activation_terms(s, b, h, a, **kwargs).values())

    assert total() == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert total(tensor_parallel=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert total(tensor_parallel=t, sequence_parallel=True) == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)))
    assert total(recompute="selective", tensor_parallel=t) == pytest.approx(sbh * (10 + 24 / t))
    assert total(recompute="selective", tensor_parallel=t, sequence_parallel=True) == pytest.approx(sbh * 34 / t)
    assert total(recompute="full") == 2 * sbh


@pytest.mark.fast
def test_selective_recomputation_saves_gpt3_seventy_percent_as_the_paper_says():
    # Section 5: for GPT-3 the core attention holds 5as/h = 80 of every 34 + 80 bytes.
    a, h, _ = PAPER_MODELS["175B"]
    none, selective = (activation_bytes(96, h, 2048, 1, r, heads=a) for r in ("none", "selective"))
    assert none / selective == pytest.approx((34 + 80) / 34)
    assert round(1 - selective / none, 2) == 0.70


@pytest.mark.fast
def test_the_default_is_the_estimate_the_other_pages_use_and_bad_settings_raise():
    assert activation_bytes(layers=2, hidden=10, seq_len=3, micro_batch=4) == 34 * 3 * 4 * 10 * 2
    with pytest.raises(ValueError, match="needs heads"):
        activation_bytes(2, 10, 3, 4, recompute="none")
    with pytest.raises(ValueError, match="one of none, selective, full"):
        layer_activation_terms(3, 4, 10, 2, recompute="some")


@pytest.mark.processes
def test_the_calculator_matches_what_pytorch_keeps_byte_for_byte(command_runs):
    result = command_runs.run_ok(COMMAND)
    layers, s, b, h, a = map(int, HEADER.search(result.stdout).groups())
    rows = {name: (int(kept.replace(",", "")), float(ratio)) for name, kept, _, ratio in ROW.findall(result.stdout)}
    assert set(rows) == set(RECOMPUTE), result.describe()
    for setting, (kept, _) in rows.items():
        # On a CPU dropout keeps its mask, and layer norm its statistics, in the activations' bf16.
        terms = layer_activation_terms(s, b, h, a, setting, value_bytes=2, mask_bytes=2, stats_bytes=2)
        assert kept == sum(terms.values()) * layers, (setting, kept, terms)
    assert rows["full"][0] < rows["selective"][0] < rows["none"][0]


def core_attention_share(seq_len: int, hidden: int, heads: int) -> tuple[int, int]:
    """(5·a·s/h, 34 + 5·a·s/h): the core attention's bytes of every layer's, per s·b·h, by the paper."""
    core = layer_activation_terms(seq_len, 1, hidden, heads, "none")
    rest = layer_activation_terms(seq_len, 1, hidden, heads, "selective")
    sbh = seq_len * hidden
    return round((sum(core.values()) - sum(rest.values())) / sbh), round(sum(core.values()) / sbh)


@pytest.mark.fast
def test_the_pages_figures_come_from_the_calculator_and_the_run():
    """'485 GiB of activations instead of 85 ... 160 of every 194 bytes ... 56 devices ... instead of
    16 ... with --recompute full the layers keep 5 GiB', and the share at the run's sizes."""
    from distdocs.calculators.memory import GIB, bytes_per_parameter, tensor_pipeline_split

    page = (REPO / "docs/deep-dives/activation-recomputation.md").read_text()
    gib = {r: activation_bytes(80, 8192, 4096, 1, r, heads=64) / GIB for r in RECOMPUTE}
    split = {r: tensor_pipeline_split(70e9, bytes_per_parameter(), 80 * GIB, gib[r] * GIB) for r in RECOMPUTE}
    devices = {r: split[r][0] * split[r][1] for r in RECOMPUTE}
    core, every = core_attention_share(4096, 8192, 64)
    _, s, _, h, a = map(int, HEADER.search((REPO / "measurements/recomputation-cpu.txt").read_text()).groups())
    run_core, run_every = core_attention_share(s, h, a)
    for claim in (
        f"{gib['none']:.0f} GiB of activations instead of {gib['selective']:.0f}",
        f"5·a·s/h = {core}, so the core attention holds {core} of every {every} bytes",
        f"It takes {devices['none']} devices",
        f"instead of {devices['selective']}",
        f"the layers keep {gib['full']:.0f} GiB",
        f"{activation_bytes(1, 8192, 4096, 1, 'none', heads=64) / GIB:.1f} GiB more",  # a layer rebuilt
        f"5·a·s/h = {run_core} of every {run_every} bytes at this run's s = {s}",
    ):
        assert claim in " ".join(page.split()), claim  # the page's words, its line breaks as spaces


@pytest.mark.fast
def test_the_saved_run_shows_full_recomputation_costing_more_than_its_flops_and_selective_little():
    text = (REPO / "measurements/recomputation-cpu.txt").read_text()
    assert text.startswith("# ") and "self-check passed" in text
    ratio = {name: float(r) for name, _, _, r in ROW.findall(text)}
    layers, s, b, h, a = map(int, HEADER.search(text).groups())
    # "Both settings cost more than their FLOPs predict": a step is 3 forwards; selective redoes the
    # core attention's two s x s matmuls (4·s²·h·b FLOPs), full the whole forward (24·s·h²·b + 4·s²·h·b).
    core, forward = 4 * s * s * h * b, 24 * s * h * h * b + 4 * s * s * h * b
    assert ratio["none"] == 1.0
    assert 1 + core / (3 * forward) < ratio["selective"] < 1 + 1 / 3 < ratio["full"]


@pytest.mark.fast
def test_reentrant_checkpoint_on_raw_data_leaves_no_gradient_with_the_warning_the_page_quotes():
    """The pitfall: use_reentrant=True on a part whose inputs need no grad gives its parameters no
    gradient, and torch only warns. The page quotes that warning; torch's text is held to it."""
    import warnings

    import torch
    from torch.utils.checkpoint import checkpoint

    layer = torch.nn.Linear(4, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = checkpoint(layer, torch.randn(2, 4), use_reentrant=True)
    assert not out.requires_grad and layer.weight.grad is None
    (message,) = {str(w.message) for w in caught}
    page = " ".join((REPO / "docs/deep-dives/activation-recomputation.md").read_text().split())
    assert f'"{message}"' in page, message
