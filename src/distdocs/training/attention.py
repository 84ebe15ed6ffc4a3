"""Ring attention: attention over a sequence split across ranks, built from point-to-point sends the way
the lesson builds the ring allreduce.

Each rank holds one contiguous chunk of the sequence: its queries, keys and values. Every query needs
every key, so the key/value chunks travel around the ring: at each of n steps a rank computes its
queries against the chunk it holds while it passes that chunk to the right and receives the next from
the left. An *online softmax* (the trick of FlashAttention) lets it fold each chunk in as it comes:
it keeps, for each query, the largest score seen (m), the sum of exponentials, and the weighted
sum of values, rescaling the last two whenever m grows. After n steps it holds softmax(QKᵀ/√d)·V
for its queries, exactly as if it had seen the whole sequence at once, up to float rounding.

No rank ever holds more than two key/value chunks and one (T/n) × (T/n) block of scores: the memory
that grows with the sequence is divided by n.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _pass_right(block: torch.Tensor, group=None) -> tuple[torch.Tensor, list]:
    """Start sending `block` to the next rank and receiving the previous rank's; the requests to wait on."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = (rank + 1) % n, (rank - 1) % n
    if group is not None:
        right, left = dist.get_global_rank(group, right), dist.get_global_rank(group, left)
    incoming = torch.empty_like(block)
    ops = [dist.P2POp(dist.irecv, incoming, left, group), dist.P2POp(dist.isend, block, right, group)]
    return incoming, dist.batch_isend_irecv(ops)  # batched: nccl would deadlock on a crossing send and receive


# --8<-- [start:ring_attention]
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, group=None):
    """softmax(QKᵀ/√d)·V for this rank's chunk of queries, over every rank's keys and values. q, k, v:
    [..., T/n, d], the chunks of rank order 0, 1, ... make the sequence. With `causal`, a query sees
    only keys at or before its own position."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    scale = q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)  # the largest score so far
    total = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)  # sum of exp(score - m)
    acc = torch.zeros_like(q)  # sum of exp(score - m) · value
    kv = torch.stack([k, v]).contiguous()
    for step in range(n):
        source = (rank - step) % n  # whose chunk of keys and values this is
        if step < n - 1:
            incoming, requests = _pass_right(kv, group)  # the next chunk travels while this one is used
        if not causal or source <= rank:  # a later chunk is all in a causal query's future
            scores = q @ kv[0].transpose(-2, -1) * scale
            if causal and source == rank:  # the diagonal block: each query sees itself and before
                future = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1))
            p = torch.exp(scores - m_new[..., None])
            rescale = torch.exp(m - m_new)  # what the old sums were relative to
            total = total * rescale + p.sum(dim=-1)
            acc = acc * rescale[..., None] + p @ kv[1]
            m = m_new
        if step < n - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return acc / total[..., None]


# --8<-- [end:ring_attention]
