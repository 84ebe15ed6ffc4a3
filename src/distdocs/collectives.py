"""Allreduce built from point-to-point messages: the ring the lesson teaches, and the naive and tree
algorithms it is compared with.

All three sum `tensor` in place across the ranks of `group`, as `dist.all_reduce(tensor)` does, and
return it. They check their input first: a tensor that is not contiguous raises at once, and ranks that
pass different shapes or dtypes all raise instead of hanging or corrupting memory. Detecting a mismatch
needs a handshake: one all_reduce of six int64s before the data moves, which costs one small
all_reduce (`distdocs bench allreduce` times it in its `check` rows). `validate=False` skips it.
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


def _exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group, stats: dict | None) -> tuple:
    """Send `send` to `dst` and receive `recv` from `src`. Returns once `recv` has arrived, with two
    requests: the send's, which may still be in flight, and the receive's, done. Wait for the send
    before letting go of the receive's request: on gloo, freeing a receive request waits for the
    connection, which a send in flight holds, so the caller's work would stop overlapping the send."""
    if stats is not None:
        stats["steps"] = stats.get("steps", 0) + 1
        stats["bytes_sent"] = stats.get("bytes_sent", 0) + send.numel() * send.element_size()
    if dist.get_backend(group) == "nccl":  # nccl deadlocks on a send and a receive that cross unless batched
        ops = [dist.P2POp(dist.isend, send, dst, group), dist.P2POp(dist.irecv, recv, src, group)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return _Done(), _Done()
    sending = dist.isend(send, dst, group)  # first, so that the neighbour's receive can start at once
    receiving = dist.irecv(recv, src, group)
    receiving.wait()
    return sending, receiving


# --8<-- [start:ring]
def ring_allreduce(tensor: torch.Tensor, group=None, validate: bool = True, stats: dict | None = None) -> torch.Tensor:
    """Sum `tensor` across ranks, in place: a reduce-scatter, then an all-gather, around a ring.

    The tensor is cut into n chunks. In each of n-1 reduce-scatter steps every rank sends one chunk to
    its right neighbour and adds the chunk that arrives from its left; after them, rank r holds the
    full sum of chunk (r+1) % n. In n-1 all-gather steps the finished chunks travel once more around
    the ring. Every rank sends 2(n-1) chunks of S/n bytes: 2(n-1)/n * S in all.
    Pass a dict as `stats` to have this rank's "steps" and "bytes_sent" counted into it.
    """
    if validate:
        check_same_tensor_everywhere(tensor, group)
    n = dist.get_world_size(group)
    if n == 1 or tensor.numel() == 0:
        return tensor
    rank = dist.get_rank(group)
    right, left = _peer(group, (rank + 1) % n), _peer(group, (rank - 1) % n)
    chunks = tensor.view(-1).tensor_split(n)  # sizes differ by at most one element
    inbox = _workspace(tensor, chunks[0].numel())  # chunk 0 is the largest

    for step in range(n - 1):  # reduce-scatter: add what arrives into my copy of that chunk
        send, recv = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        arrived = inbox[: recv.numel()]
        sending, received = _exchange(send, right, arrived, left, group, stats)
        recv += arrived  # while the chunk sent may still be on its way
        sending.wait()

    for step in range(n - 1):  # all-gather: finished chunks overwrite stale ones
        send, recv = chunks[(rank + 1 - step) % n], chunks[(rank - step) % n]
        sending, received = _exchange(send, right, recv, left, group, stats)
        sending.wait()
    return tensor


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
