"""What a live run on a dialled link can be held to, whatever the load on the machine: the bytes a
node sends, and the least time the link takes for them."""

from __future__ import annotations

from distdocs.arguments import parse_rate
from distdocs.lab import links

# What a node's link sends over the payload of a 2-rank ring allreduce (which sends each node the whole
# payload): TCP/IP headers (52 bytes per 1448-byte segment, 3.6%), acknowledgements of what it receives,
# and the barriers between steps. Never less than the payload.
SENT_BOUNDS = (1.0, 1.15)


def link_floor_s(nbytes: float, rate: str) -> float:
    """The least time a 2-rank ring allreduce of `nbytes` takes on a link of `rate`: each node sends
    the whole payload (half in the reduce-scatter, half in the all-gather), and each half may start
    on a full tbf bucket (distdocs.lab.links.burst_bytes) that passes at once. Headers ride free.
    Load only adds time, so no step on the link can take less."""
    return max(0.0, nbytes - 2 * links.burst_bytes(rate)) * 8 / parse_rate(rate)
