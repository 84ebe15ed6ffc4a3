"""The five collectives, each shown by what every rank holds before and after.

Launch (2 processes on the CPU, gloo; try 4 too):

    torchrun --standalone --nproc_per_node=2 examples/collectives/step01_collectives_tour.py

Rank r starts each demo holding [10r, 10r+1, ..., 10r+n-1] for a world of n. Rank 0 prints, in rank
order, what every rank held before and after broadcast, reduce, all_reduce, all_gather and
reduce_scatter, and each result is checked against the same operation done by hand on every rank's
input.
"""

import torch
import torch.distributed as dist

from distdocs.runtime import distributed, print0


def start_value(rank: int, n: int, device) -> torch.Tensor:
    return torch.arange(n, device=device) + 10 * rank


def show(title: str, before: torch.Tensor, after: torch.Tensor, expected: torch.Tensor,
         defined: bool = True) -> None:
    """Gather every rank's before/after to rank 0 and print them in rank order; check `after`."""
    line = f"before {before.tolist()}  after {after.tolist() if defined else '(undefined)'}"
    lines = [None] * dist.get_world_size()
    dist.all_gather_object(lines, line)  # printing from every rank would interleave at random
    print0(title)
    for rank, text in enumerate(lines):
        print0(f"  [rank {rank}] {text}")
    if defined:
        assert torch.equal(after, expected), f"{title}: got {after.tolist()}, expected {expected.tolist()}"


def main() -> None:
    with distributed() as rt:
        n, me, dev = rt.world_size, rt.rank, rt.device
        everyone = [start_value(r, n, dev) for r in range(n)]  # what each rank starts with
        total = sum(everyone)

        # --8<-- [start:tour]
        x = start_value(me, n, dev)
        dist.broadcast(y := x.clone(), src=0)  # rank 0's tensor, copied to every rank
        show("broadcast(src=0)", x, y, everyone[0])

        dist.reduce(y := x.clone(), dst=0)  # the sum, delivered to rank 0 only
        show("reduce(dst=0)", x, y, total, defined=me == 0)

        dist.all_reduce(y := x.clone())  # the sum, on every rank
        show("all_reduce", x, y, total)

        gathered = torch.empty(n * n, dtype=x.dtype, device=dev)
        dist.all_gather_single(gathered, x)  # every rank's tensor, concatenated, on every rank
        show("all_gather", x, gathered, torch.cat(everyone))

        mine = torch.empty(1, dtype=x.dtype, device=dev)
        dist.reduce_scatter_single(mine, x)  # the sum, cut in n pieces: rank r keeps piece r
        show("reduce_scatter", x, mine, total[me : me + 1])
        # --8<-- [end:tour]
        print0("self-check passed")


if __name__ == "__main__":
    main()
