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
    """The least time a node's link of `rate` takes to send `nbytes`, as a 2-rank ring allreduce of
    `nbytes` sends (half in the reduce-scatter, half in the all-gather) or any collective whose bytes
    across are counted. tbf lets through at most its bucket (distdocs.lab.links.burst_bytes) plus its
    rate for the time since; two buckets are allowed for, as if each half started on a full one.
    Headers ride free. Load only adds time, so nothing on the link can take less."""
    return max(0.0, nbytes - 2 * links.burst_bytes(rate)) * 8 / parse_rate(rate)
