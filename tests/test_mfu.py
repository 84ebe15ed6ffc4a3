"""distdocs.calculators.mfu and `distdocs mfu`: the FLOPs of a training token (6N + 12·L·d·T) and the MFU a
throughput reaches, held to the figures torchtitan published for Llama 2 and Llama 3 on 64 A100s:
every MFU of its tables is reproduced from its own inputs (tokens/s per GPU, the model's layout,
its sequence length, the A100's 312 TFLOP/s in bf16) to the 0.1% it printed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distdocs.calculators.mfu import flops_per_token, llama_params, mfu

pytestmark = pytest.mark.fast  # the test tier: see the testing page

# pytorch/torchtitan, docs/performance.md at commit 041336434916bdc0f88c1f89fda176fd3c2092e4: FSDP2 on
# 64 A100 (80GB) GPUs. (model, activation checkpointing) -> (tokens/s per GPU, MFU in % as printed).
PUBLISHED = {
    ("llama3-8b", "selective layer"): (2904, 56.8),
    ("llama3-8b", "selective op"): (2973, 58.2),
    ("llama3-70b", "full"): (331, 51.7),
    ("llama2-13b", "no"): (2162, 61.1),
    ("llama2-13b", "selective layer"): (1914, 54.1),
    ("llama2-13b", "selective op"): (1904, 53.8),
    ("llama2-70b", "selective op"): (355, 50.8),
    ("llama2-70b", "full"): (353, 50.5),
}
# The models' layouts (layers, hidden, heads, kv heads, SwiGLU size, vocabulary) and torchtitan's
# training sequence lengths (8192 for Llama 3, 4096 for Llama 2), from their configurations.
MODELS = {
    "llama3-8b": ((32, 4096, 32, 8, 14336, 128256), 8192),
    "llama3-70b": ((80, 8192, 64, 8, 28672, 128256), 8192),
    "llama2-13b": ((40, 5120, 40, 40, 13824, 32000), 4096),
    "llama2-70b": ((80, 8192, 64, 8, 28672, 32000), 4096),
}
A100_BF16 = 312e12


@pytest.mark.parametrize("model, checkpointing", list(PUBLISHED))
def test_torchtitans_published_mfu_is_reproduced_from_its_own_inputs(model, checkpointing):
    (layers, hidden, *rest), seq_len = MODELS[model]
    tokens_per_s, published = PUBLISHED[model, checkpointing]
    n = llama_params(layers, hidden, *rest).total  # every parameter, the embedding table too, as they counted
    assert round(100 * mfu(tokens_per_s, flops_per_token(n, layers, hidden, seq_len), A100_BF16), 1) == published
    # Recomputation does not change the FLOPs counted: the same model, checkpointed or not, counts the same.
    without = llama_params(layers, hidden, *rest).without_embedding
    assert round(100 * mfu(tokens_per_s, flops_per_token(without, layers, hidden, seq_len), A100_BF16), 1) < published


@pytest.mark.parametrize(
    "model, size", [("llama3-8b", "8.03"), ("llama3-70b", "70.6"), ("llama2-13b", "13"), ("llama2-70b", "69")]
)
def test_the_llama_layout_counts_the_published_model_sizes(model, size):
    """The sizes of the model cards, in billions, to the three figures they print."""
    (layers, hidden, *rest), _ = MODELS[model]
    assert f"{llama_params(layers, hidden, *rest).total / 1e9:.3g}" == size


def test_the_formula_is_six_flops_a_parameter_plus_attentions_two_matmuls():
    assert flops_per_token(1e9, 0, 1, 1) == 6e9  # 2 forward + 4 backward per parameter
    # Q·Kᵀ and scores·V: 2 matmuls of T·d multiply-adds per token and layer, x2 FLOPs, x3 with backward.
    assert flops_per_token(0, 2, 64, 1000) == 2 * 2 * 2 * 64 * 1000 * 3
    assert mfu(1000, 1e12, 1e15) == 1.0


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distdocs.cli", "mfu", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--layers", "32", "--hidden", "4096", "--seq-len", "8192", "--tokens-per-s", "1", "--peak-tflops", "1"],
         "give --params, or --heads, --kv-heads, --ffn and --vocab"),
        (["--params", "8B", "--layers", "0", "--hidden", "4096", "--seq-len", "8192", "--tokens-per-s", "1",
          "--peak-tflops", "1"], "--layers, --hidden and --seq-len must be positive"),
        (["--params", "8B", "--layers", "32", "--hidden", "4096", "--seq-len", "8192", "--tokens-per-s", "1",
          "--peak-tflops", "-3"], "--tokens-per-s and --peak-tflops must be positive"),
        (["--params", "lots", "--layers", "32", "--hidden", "4096", "--seq-len", "8192", "--tokens-per-s", "1",
          "--peak-tflops", "1"], "bad count 'lots'"),
    ],
)  # fmt: skip
def test_bad_input_gets_one_line_and_exit_2(args, message):
    result = run_cli(*args)
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.holds(
    "docs/deep-dives/profile-first.md",
    "On the run above, leaving attention out moves MFU from 58.2% to 45.9%, 12 points, since attention is 21% of "
    "its FLOPs per token at 8192 tokens of context; leaving the embedding table out of N moves it to 55.2%.",
)
def test_what_counting_attention_and_the_embedding_does_to_llama3_8bs_mfu():
    n = llama_params(32, 4096, 32, 8, 14336, 128256)
    full = flops_per_token(n.total, 32, 4096, 8192)
    attention = full - 6 * n.total
    shown = [round(100 * mfu(2973, f, 312e12), 1) for f in (full, 6 * n.total, full - 6 * n.embedding)]
    assert shown == [58.2, 45.9, 55.2] and round(shown[0] - shown[1]) == 12
    assert round(attention / full, 2) == 0.21
