"""DDP from scratch: gradient buckets and asynchronous all_reduce that overlaps with backward,
checked against torch's DistributedDataParallel.

Launch (2 processes on the CPU, gloo):

    torchrun --standalone --nproc_per_node=2 examples/data_parallel/step03_ddp_from_scratch.py

distdocs.ddp.BucketedDDP (about 100 lines) groups the gradients into buckets and all_reduces each
bucket as soon as backward has filled it, while backward goes on with earlier layers. The example
trains the same model with it and with torch's DDP, with small buckets so that there are several,
and the self-check asserts that both end with the same weights: bitwise at world size 2, where
both compute x/2 + y/2, and within float32's default tolerance otherwise.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from distdocs.ddp import BucketedDDP
from distdocs.runtime import distributed, print0

BUCKET_CAP_MB = 0.25  # small, so that this small model still gets several buckets
STEPS = 20


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def train(model: nn.Module, rank: int, device) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)  # each rank its own data
    for _ in range(STEPS):
        x, y = torch.randn(32, 64, generator=g).to(device), torch.randint(0, 10, (32,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()  # buckets are all_reduced during this call
        opt.step()


def main() -> None:
    with distributed() as rt:
        # --8<-- [start:use]
        ours = BucketedDDP(make_model().to(rt.device), bucket_cap_mb=BUCKET_CAP_MB)
        theirs = DDP(make_model().to(rt.device), bucket_cap_mb=BUCKET_CAP_MB)
        train(ours, rt.rank, rt.device)
        train(theirs, rt.rank, rt.device)
        # --8<-- [end:use]

        sizes = [sum(p.numel() for p in b) for b in ours.buckets]
        print0(f"world size {rt.world_size}: {len(sizes)} buckets of {sizes} parameters, last layers first")
        pairs = list(zip(ours.module.parameters(), theirs.module.parameters()))
        diff = max((a - b).abs().max().item() for a, b in pairs)
        print0(f"max |from-scratch DDP - torch DDP| after {STEPS} steps = {diff:.1e}")
        for a, b in pairs:
            torch.testing.assert_close(a, b)  # float32 defaults
        if rt.world_size == 2:
            same = all(torch.equal(a, b) for a, b in pairs)
            print0(f"bitwise equal to torch DDP: {same}")
            assert same
        # All replicas must hold the same weights, or data parallelism has failed.
        checksum = torch.stack([p.detach().double().sum() for p in ours.module.parameters()]).sum()
        everyone = [torch.zeros_like(checksum) for _ in range(rt.world_size)]
        dist.all_gather(everyone, checksum)
        assert all(torch.equal(c, checksum) for c in everyone)
        print0("self-check passed")


if __name__ == "__main__":
    main()
