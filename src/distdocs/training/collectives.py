"""Allreduce built from point-to-point messages: the ring the lesson teaches, the naive and tree
algorithms it is compared with, and the two-level allreduce of ranks spread over nodes.

All three sum `tensor` in place across the ranks of `group`, as `dist.all_reduce(tensor)` does, and
return it. The ring takes a `wire` too: the scale model's emulated link (`distdocs.lab.wire`),
through which each message passes before it is sent; on a real network, leave it out. They check
their input first: a tensor that is not contiguous raises at once, and ranks that pass different
shapes or dtypes all raise instead of hanging or corrupting memory. Detecting a mismatch needs a
handshake: one all_reduce of six int64s before the data moves, which costs one small all_reduce
(`distdocs bench allreduce` times it in its `check` rows). `validate=False` skips it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

DTYPE_CODES = {torch.float32: 1, torch.float64: 2, torch.int64: 3, torch.bfloat16: 4, torch.float16: 5, torch.int32: 6}
_WORKSPACES: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _peer(group, group_rank: int) -> int:
    """The global rank that send/recv need, for a rank numbered within `group`."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def check_same_tensor_everywhere(tensor: torch.Tensor, group=None) -> None:
    """Raise the same error on every rank if any rank's tensor is not contiguous, or the ranks
    disagree on its element count or dtype. One all_reduce(MAX) of six int64s: each property is sent
    as +x and -x, so the max of both gives every rank the largest and the smallest value seen."""
    code = DTYPE_CODES.get(tensor.dtype, 0)
    contiguous = int(tensor.is_contiguous())
    mine = [tensor.numel(), code, contiguous]
    seen = torch.tensor(mine + [-v for v in mine], dtype=torch.int64, device=tensor.device)
    dist.all_reduce(seen, op=dist.ReduceOp.MAX, group=group)
    (most, top_code, _), (least, low_code, any_strided) = seen[:3].tolist(), (-seen[3:]).tolist()
    if any_strided == 0:
        raise ValueError(
            "allreduce needs a contiguous tensor on every rank; call .contiguous() first "
            f"(this rank's is {'contiguous' if contiguous else 'not contiguous'})"
        )
    if most != least:
        raise ValueError(
            f"ranks pass tensors of different sizes to allreduce: from {least} to {most} "
            f"elements (this rank: {tensor.numel()}, shape {tuple(tensor.shape)})"
        )
    if top_code != low_code or code == 0:
        raise TypeError(
            f"ranks must pass the same supported dtype to allreduce (this rank: {tensor.dtype}; "
            f"supported: {', '.join(str(d) for d in DTYPE_CODES)})"
        )


def _workspace(like: torch.Tensor, numel: int) -> torch.Tensor:
    """A receive buffer kept from one call to the next, as gloo keeps its own. A fresh buffer of
    many MiB on every call pays a page fault for every 4 KiB page it first touches."""
    key = (like.dtype, like.device)
    if key not in _WORKSPACES or _WORKSPACES[key].numel() < numel:
        _WORKSPACES[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return _WORKSPACES[key][:numel]


class _Done:
    """A request that has already completed."""

    def wait(self) -> None:
        pass


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group, stats: dict | None, wire) -> tuple:
    """Send `send` to `dst` and receive `recv` from `src`. Returns once `recv` has arrived, with two
    requests: the send's, which may still be in flight, and the receive's, done. Wait for the send
    before letting go of the receive's request: on gloo, freeing a receive request waits for the
    connection, which a send in flight holds, so the caller's work would stop overlapping the send."""
    if stats is not None:
        stats["steps"] = stats.get("steps", 0) + 1
        stats["bytes_sent"] = stats.get("bytes_sent", 0) + send.numel() * send.element_size()
    if wire is not None:  # the scale model's emulated link: it delivers the message when the link would
        return wire.exchange(send, dst, recv, src, group)
    if dist.get_backend(group) == "nccl":  # nccl deadlocks on a send and a receive that cross unless batched
        ops = [dist.P2POp(dist.isend, send, dst, group), dist.P2POp(dist.irecv, recv, src, group)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return _Done(), _Done()
    # The receive first. gloo moves a message once its receiver has posted the buffer; when both
    # neighbours post their send first, one direction can wait for the other's whole message: over a
    # dialled link, 2 ranks then reached 0.6-0.7 of gloo's all_reduce, and half the link at worst.
    receiving = dist.irecv(recv, src, group)
    sending = dist.isend(send, dst, group)
    receiving.wait()
    return sending, receiving


# --8<-- [start:ring]
def ring_allreduce(
    tensor: torch.Tensor, group=None, validate: bool = True, stats: dict | None = None, wire=None
) -> torch.Tensor:
    """Sum `tensor` across ranks, in place: a reduce-scatter, then an all-gather, around a ring.

    The tensor is cut into n chunks. In each of n-1 reduce-scatter steps every rank sends one chunk to
    its right neighbour and adds the chunk that arrives from its left; after them, rank r holds the
    full sum of chunk (r+1) % n. In n-1 all-gather steps the finished chunks travel once more around
    the ring. Every rank sends 2(n-1) chunks of S/n bytes: 2(n-1)/n * S in all.
    Pass a dict as `stats` to have this rank's "steps" and "bytes_sent" counted into it, and the scale
    model's emulated link as `wire` to send every message through it.
    """
    if validate:
        check_same_tensor_everywhere(tensor, group)
    n = dist.get_world_size(group)
    if n == 1 or tensor.numel() == 0:
        return tensor
    chunks = tensor.view(-1).tensor_split(n)  # sizes differ by at most one element
    ring_reduce_scatter(chunks, group, stats, wire)
    ring_all_gather(chunks, group, stats, wire)
    return tensor


def ring_reduce_scatter(chunks: tuple[torch.Tensor, ...], group=None, stats: dict | None = None, wire=None) -> int:
    """n-1 steps: send one chunk right, add the one that arrives from the left into my copy of it.
    Returns the index of the chunk this rank then holds summed over every rank: (rank + 1) % n."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = _peer(group, (rank + 1) % n), _peer(group, (rank - 1) % n)
    inbox = _workspace(chunks[0], chunks[0].numel())  # chunk 0 is the largest
    for step in range(n - 1):
        send, recv = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        arrived = inbox[: recv.numel()]
        sending, received = _exchange(send, right, arrived, left, group, stats, wire)
        recv += arrived  # while the chunk sent may still be on its way
        sending.wait()
    return (rank + 1) % n


def ring_all_gather(chunks: tuple[torch.Tensor, ...], group=None, stats: dict | None = None, wire=None) -> None:
    """n-1 steps after ring_reduce_scatter: the finished chunks travel around the ring once more,
    overwriting the stale copies, until every rank holds every chunk summed."""
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    right, left = _peer(group, (rank + 1) % n), _peer(group, (rank - 1) % n)
    for step in range(n - 1):
        send, recv = chunks[(rank + 1 - step) % n], chunks[(rank - step) % n]
        sending, received = _exchange(send, right, recv, left, group, stats, wire)
        sending.wait()


# --8<-- [end:ring]


# --8<-- [start:naive]
def naive_allreduce(tensor: torch.Tensor, group=None, validate: bool = True) -> torch.Tensor:
    """Sum `tensor` across ranks, in place: every rank sends to rank 0, which adds the tensors in
    rank order and sends the sum back. Rank 0 moves 2(n-1)·S bytes; the others 2·S."""
    if validate:
        check_same_tensor_everywhere(tensor, group)
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if n == 1 or tensor.numel() == 0:
        return tensor
    root = _peer(group, 0)
    if rank == 0:
        inbox = _workspace(tensor, tensor.numel()).view_as(tensor)
        for other in range(1, n):
            dist.recv(inbox, src=_peer(group, other), group=group)
            tensor += inbox
        for other in range(1, n):
            dist.send(tensor, dst=_peer(group, other), group=group)
    else:
        dist.send(tensor, dst=root, group=group)
        dist.recv(tensor, src=root, group=group)
    return tensor


# --8<-- [end:naive]


# --8<-- [start:tree]
def tree_allreduce(tensor: torch.Tensor, group=None, validate: bool = True) -> torch.Tensor:
    """Sum `tensor` across ranks, in place, along a binomial tree: ceil(log2 n) rounds up to rank 0,
    in each of which half the remaining ranks send their partial sum to a partner, then the same
    rounds down, broadcasting the total. Few messages (latency-friendly); whole tensors in each."""
    if validate:
        check_same_tensor_everywhere(tensor, group)
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if n == 1 or tensor.numel() == 0:
        return tensor
    inbox = _workspace(tensor, tensor.numel()).view_as(tensor)
    mask = 1
    while mask < n:  # reduce: at distance `mask`, odd multiples send to even ones
        if rank & mask:
            dist.send(tensor, dst=_peer(group, rank - mask), group=group)
            break
        if rank + mask < n:
            dist.recv(inbox, src=_peer(group, rank + mask), group=group)
            tensor += inbox
        mask <<= 1
    # broadcast: retrace the same edges from the root down, largest distance first.
    if rank:
        dist.recv(tensor, src=_peer(group, rank - mask), group=group)
    mask >>= 1
    while mask:
        if rank + mask < n:  # the children this rank received from on the way up
            dist.send(tensor, dst=_peer(group, rank + mask), group=group)
        mask >>= 1
    return tensor


# --8<-- [end:tree]


# --8<-- [start:two_level]
def node_groups(ranks_per_node: int) -> tuple:
    """This rank's two groups when ranks fill nodes in order, `ranks_per_node` each: the ranks on its
    node, and the ranks with its local rank on every node. new_group is collective: every rank
    creates every group, in the same order, and keeps the two it belongs to."""
    n, rank = dist.get_world_size(), dist.get_rank()
    if ranks_per_node < 1 or n % ranks_per_node:
        raise ValueError(f"ranks_per_node must divide the world size {n}, not {ranks_per_node!r}")
    nodes = n // ranks_per_node
    inside = [dist.new_group(list(range(i * ranks_per_node, (i + 1) * ranks_per_node))) for i in range(nodes)]
    across = [dist.new_group(list(range(local, n, ranks_per_node))) for local in range(ranks_per_node)]
    return inside[rank // ranks_per_node], across[rank % ranks_per_node]


def two_level_allreduce(
    tensor: torch.Tensor, inside, across, validate: bool = True, stats: dict | None = None
) -> torch.Tensor:
    """Sum `tensor` across every rank, in place, in three steps: a ring reduce-scatter among the k
    ranks of a node, a ring allreduce of each rank's finished chunk with the ranks of its local rank
    on the other nodes, and a ring all-gather inside the node. `inside` and `across` are node_groups().

    Only the middle step leaves the node: each rank sends 2(N-1)/N * S/k bytes across, N nodes,
    against a flat ring's 2(n-1)/n * S through its slowest link. `stats` gets "bytes_sent" and, of
    those, "bytes_between_nodes"."""
    if validate:
        check_same_tensor_everywhere(tensor)
    if tensor.numel() == 0:
        return tensor
    chunks = tensor.view(-1).tensor_split(dist.get_world_size(inside))
    mine = ring_reduce_scatter(chunks, inside, stats)  # my chunk, summed over my node
    crossing: dict = {}
    ring_allreduce(chunks[mine], across, validate=False, stats=crossing)  # ... and over every node
    ring_all_gather(chunks, inside, stats)  # every chunk, to every rank of my node
    if stats is not None:
        sent = crossing.get("bytes_sent", 0)
        stats["bytes_sent"] = stats.get("bytes_sent", 0) + sent
        stats["bytes_between_nodes"] = stats.get("bytes_between_nodes", 0) + sent
        stats["steps"] = stats.get("steps", 0) + crossing.get("steps", 0)
    return tensor


# --8<-- [end:two_level]
