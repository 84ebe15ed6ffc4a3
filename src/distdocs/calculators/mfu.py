"""Model FLOPs utilisation (MFU): how much of a device's peak arithmetic a training run turns into the
model's own arithmetic.

The FLOPs of one training token of a dense decoder-only transformer (PaLM, Chowdhery et al. 2022,
appendix B; torchtitan computes the same):

    6·N + 12·L·d·T

- 6·N for the matmuls with the weights: 2 FLOPs per parameter in the forward pass (a multiply and an
  add), 4 in the backward (the gradients of the inputs and of the weights; Kaplan et al. 2020).
- 12·L·d·T for attention's own two matmuls, Q·Kᵀ and the scores times V, in L layers of width d
  (heads × head size) over a sequence of T tokens: 2 matmuls × 2 FLOPs × 3 (forward and backward),
  counted in full, as the convention is, though a causal mask skips half.

Work that is done again, activation recomputation, is not counted: MFU measures the model, not the
implementation (the hardware FLOPs utilisation, HFU, counts it). MFU = tokens per second per device
× FLOPs per token ÷ the device's peak FLOP/s in the precision the matmuls run in.

What N counts is a convention that changes the answer by several per cent: every parameter, or all but
the embedding table (a lookup, not a matmul). torchtitan's published Llama figures of 2024 count every
parameter; `flops_per_token` takes N as given, and `llama_params` counts both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    """The parameters of a Llama-style transformer: total, and the embedding table's share."""

    total: int
    embedding: int

    @property
    def without_embedding(self) -> int:
        return self.total - self.embedding


def llama_params(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int) -> Params:
    """Llama's layout: per layer, attention's q and o (d×d) and k and v (d × kv_heads·head size), a
    SwiGLU feed-forward of three d×ffn matrices and two RMSNorm weights; an embedding table, a final
    norm and an output projection that is not tied to the embedding."""
    head = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head
    per_layer = attention + 3 * hidden * ffn + 2 * hidden
    embedding = vocab * hidden
    return Params(layers * per_layer + embedding + hidden + vocab * hidden, embedding)


def flops_per_token(params: float, layers: int, hidden: int, seq_len: int) -> float:
    """6·N + 12·L·d·T: one token's forward and backward through a dense transformer."""
    return 6 * params + 12 * layers * hidden * seq_len


def mfu(tokens_per_s: float, flops_token: float, peak_flops: float) -> float:
    """The share of `peak_flops` (one device's) that `tokens_per_s` (per device) computes."""
    return tokens_per_s * flops_token / peak_flops


def report(params: float, layers: int, hidden: int, seq_len: int, tokens_per_s: float, peak_tflops: float) -> str:
    """What `distdocs mfu` prints: the FLOPs per token and their two terms, the FLOP/s achieved, the MFU."""
    total = flops_per_token(params, layers, hidden, seq_len)
    weights, attention = 6 * params, 12 * layers * hidden * seq_len
    share = mfu(tokens_per_s, total, peak_tflops * 1e12)
    return "\n".join(
        [
            f"FLOPs per token: {total:.4g} = 6N {weights:.4g} + attention 12·L·d·T {attention:.4g}"
            f" (N = {params:.4g}, L = {layers}, d = {hidden}, T = {seq_len})",
            f"achieved: {tokens_per_s:g} tokens/s x {total:.4g} = {tokens_per_s * total / 1e12:.1f} TFLOP/s"
            f" per device, of a {peak_tflops:g} TFLOP/s peak",
            f"MFU: {100 * share:.1f}%",
        ]
    )
