"""A link emulated in the ranks themselves: every message a rank sends is paced at a dialled rate, so
that the scale model measures for any user, on Linux or macOS, with no root, no namespaces and no tc.

The collective runs for real. DDP hands each bucket to a communication hook (`ring_hook`), which runs
the lesson's ring (`distdocs.training.collectives.ring_allreduce`) on a thread of its own, beside the backward
pass, as a backend runs its collectives. Every message the ring sends passes through this rank's
network card (`Wire.exchange`): the card is busy for the message's bytes at the dialled rate, after
the messages queued on it before, and the receiver gets the message when its last byte would have
arrived, plus a per-message latency if one is dialled. So the time comes from the messages the
algorithm actually sends, their number, their sizes and their order; nothing here reads the cost
model.

    wire = Wire(LinkSpec("100mbit"), rank)
    ring_allreduce(tensor, group, wire=wire)                 # as over a 100 Mbit/s link
    ddp.register_comm_hook(Lane(group, wire), ring_hook)     # DDP's buckets, the same way

With `per_node` ranks to a node, a message to a rank of the same node uses the node's inside link
(`inside`, or loopback unpaced without one), any other the card between nodes.

What it reproduces, beside tc's tbf (distdocs.lab.links), and what it does not:
- bandwidth, counted as tbf counts it: whole Ethernet frames, so the payload gets about 95.6%;
- a per-message latency, which tbf cannot add (that needs netem);
- not TCP's own dynamics (slow start, a window, a retransmit), nor a switch that several nodes share:
  each rank has a card of its own to the other nodes, as in a ring, where one rank per node sends
  across. Those are tbf's alone.
- one allreduce at a time (one lane, as NCCL runs them), where gloo runs two.
"""

# No `from __future__ import annotations`: DDP checks ring_hook's annotations as objects.
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.distributed as dist

from distdocs.arguments import parse_rate
from distdocs.training.collectives import ring_allreduce

# tbf counts a frame's bytes from the Ethernet header on: a TCP segment at MTU 1500 carries 1448 bytes
# of payload (after 20 of IP, 32 of TCP with timestamps) in a frame of 1514.
PAYLOAD_SHARE = 1448 / 1514


@dataclass(frozen=True)
class LinkSpec:
    """What to emulate: each node's link to the others at `rate` (tc's spelling: 100mbit, 1gbit), a
    message's `latency_s` on top, and nodes of `per_node` ranks (numbered node by node) whose ranks
    talk over `inside` (None: loopback, as it is)."""

    rate: str
    latency_s: float = 0.0
    per_node: int = 1
    inside: str | None = None

    def __post_init__(self):
        parse_rate(self.rate)
        if self.inside:
            parse_rate(self.inside)
        if self.latency_s < 0 or self.per_node < 1:
            raise ValueError(f"latency {self.latency_s} s and {self.per_node} ranks per node: expected >= 0 and >= 1")


class Card:
    """One network card: sends one message after another, each taking its bytes at the card's rate."""

    def __init__(self, rate: str) -> None:
        self.seconds_per_byte = 8 / (parse_rate(rate) * PAYLOAD_SHARE)
        self.free_at = 0.0
        self.lock = threading.Lock()

    def reserve(self, nbytes: int, ready: float) -> float:
        """Queue `nbytes`, ready to go at `ready`, behind what the card already carries; return when
        their last byte has left it (perf_counter time)."""
        with self.lock:
            self.free_at = max(ready, self.free_at) + nbytes * self.seconds_per_byte
            return self.free_at


STAMP_BYTES = 8  # a float64 in front of every message: when its last byte arrives on the emulated link


class Wire:
    """This rank's side of an emulated link: its card to other nodes, and to its own node's ranks."""

    def __init__(self, spec: LinkSpec, rank: int) -> None:
        self.spec, self.node = spec, rank // spec.per_node
        self.between = Card(spec.rate)
        self.inside = Card(spec.inside) if spec.inside else None
        self.messages = self.bytes_sent = 0
        self.ready = 0.0  # when this rank's next message is ready to go, on the emulated link's clock

    def start(self, at: float | None = None) -> None:
        """A collective begins: its first message is ready at `at` (default: now)."""
        self.ready = time.perf_counter() if at is None else at

    def exchange(self, send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group) -> tuple:
        """What distdocs.training.collectives' ring does in each step, over the emulated link: send `send` to
        global rank `dst` and receive `recv` from `src` (both contiguous). Each message goes out at
        once, stamped with when its last byte arrives on the link, from the sender's card (its bytes
        at the card's rate, after the messages queued on it, from when the message it depends on
        arrived). The receiver returns at that time, or when the message really came, if later. So a
        rank's own delays (a Python thread waking late, the GIL, the add) overlap the link, as a
        backend's do when it pipelines a message's segments, unless they outlast it; then they count
        in full. The stamp rides in the message's first 8 bytes: a second message for it would double
        the host's work per step, which on 2 cores is what 16 ranks run short of. Returns the send's
        request, and the receive's (done)."""
        inbound = _buffer_for(recv)
        receiving = dist.irecv(inbound, src, group)
        outbound = self._stamped(send, dst, self.ready)
        sending = dist.isend(outbound, dst, group)
        receiving.wait()
        arrive = _deliver(inbound, recv)
        self.ready = max(self.ready, arrive)  # the next message carries what this one brought
        return _Sending(sending, outbound), receiving

    def send(self, tensor: torch.Tensor, dst: int, group=None) -> "_Sending":
        """One message to global rank `dst`, ready now, as a pipeline stage sends an activation: its
        bytes queue on this rank's card, stamped with when they arrive. Wait for the request before
        reusing `tensor`'s rank of the schedule."""
        outbound = self._stamped(tensor, dst, time.perf_counter())
        return _Sending(dist.isend(outbound, dst, group), outbound)

    def recv(self, tensor: torch.Tensor, src: int, group=None) -> None:
        """The message from global rank `src`, into `tensor`, returned when its last byte arrives."""
        inbound = _buffer_for(tensor)
        dist.recv(inbound, src, group)
        _deliver(inbound, tensor)

    def _stamped(self, tensor: torch.Tensor, dst: int, ready: float) -> torch.Tensor:
        """`tensor`'s bytes behind the stamp of when they arrive at global rank `dst`: through this
        rank's card to `dst`'s node from `ready` on, plus the latency. To a rank of the same node with
        no inside link dialled: loopback as it is, so the message is there at once."""
        nbytes = tensor.numel() * tensor.element_size()
        self.messages += 1
        self.bytes_sent += nbytes
        card = self.inside if dst // self.spec.per_node == self.node else self.between
        outbound = torch.empty(STAMP_BYTES + nbytes, dtype=torch.uint8)
        outbound[:STAMP_BYTES].view(torch.float64)[0] = (
            card.reserve(nbytes, ready) + self.spec.latency_s if card else ready
        )
        outbound[STAMP_BYTES:].copy_(tensor.view(-1).view(torch.uint8))
        return outbound


def _buffer_for(tensor: torch.Tensor) -> torch.Tensor:
    """Room for a stamped message of `tensor`'s size."""
    return torch.empty(STAMP_BYTES + tensor.numel() * tensor.element_size(), dtype=torch.uint8)


def _deliver(inbound: torch.Tensor, tensor: torch.Tensor) -> float:
    """Copy a received message into `tensor` and return when its stamp says it arrives, not sooner."""
    arrive = inbound[:STAMP_BYTES].view(torch.float64).item()
    tensor.view(-1).view(torch.uint8).copy_(inbound[STAMP_BYTES:])
    while (left := arrive - time.perf_counter()) > 0:
        time.sleep(left)
    return arrive


class _Sending:
    """A send's request, and its buffer, kept until the send is done."""

    def __init__(self, request, buffer: torch.Tensor) -> None:
        self.request, self.buffer = request, buffer

    def wait(self) -> None:
        self.request.wait()


class Lane:
    """A communication hook's state: the group and the wire its ring uses, the dtype the gradients
    travel in (None: their own; torch.bfloat16 halves fp32's bytes, as torch's bf16_compress_hook
    does), and the one thread that runs the buckets' allreduces in turn, beside the backward pass.
    Close it before the group is destroyed."""

    def __init__(self, group, wire: Wire, dtype: torch.dtype | None = None) -> None:
        self.group, self.wire, self.dtype = group, wire, dtype
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="wire-lane")

    def close(self) -> None:
        self.thread.shutdown(wait=True)


def ring_hook(lane: Lane, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: average the bucket over `lane.group` with the lesson's ring, over the
    emulated wire, on the lane's thread. It returns at once, so backward goes on while the ring runs;
    DDP waits for the futures at the end of backward, as it waits for its own allreduces. With the
    lane's dtype, the bucket is cast and divided before the ring and copied back after it, as
    bf16_compress_hook does; without, the sum is divided after, so integer gradients average exactly."""
    tensor, future = bucket.buffer(), torch.futures.Future()
    size = dist.get_world_size(lane.group)
    ready = time.perf_counter()

    def run() -> None:
        try:
            lane.wire.start(max(ready, lane.wire.ready))  # one at a time: after the bucket before it
            if lane.dtype is None:
                ring_allreduce(tensor, lane.group, validate=False, wire=lane.wire)
                future.set_result(tensor.div_(size))
                return
            payload = tensor.to(lane.dtype).div_(size)
            ring_allreduce(payload, lane.group, validate=False, wire=lane.wire)
            future.set_result(tensor.copy_(payload))
        except BaseException as err:  # DDP raises it in the training loop, where it waits
            future.set_exception(err)

    lane.thread.submit(run)
    return future
