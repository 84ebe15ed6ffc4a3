"""distdocs.training.ddp.BucketedDDP: bucket layout, and a clear error instead of a hang for unused parameters.
(Equality with torch's DDP is the self-check of examples/data_parallel/step03_ddp_from_scratch.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distdocs.lab.world import RankFailed, spawn_world
from distdocs.training.ddp import BucketedDDP

pytestmark = pytest.mark.processes  # the test tier: see the testing page


def bucket_sizes(rank: int, world_size: int) -> list[int]:
    torch.manual_seed(rank)  # different weights per rank: the broadcast must make them equal
    model = BucketedDDP(nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256)), bucket_cap_mb=0.25)
    return [[p.shape for p in b] for b in model.buckets], [p.sum().item() for p in model.module.parameters()]


def test_buckets_run_last_layer_first_and_weights_start_equal():
    (buckets0, weights0), (buckets1, weights1) = spawn_world(bucket_sizes, 2)
    # 0.25 MB holds 65,536 float32s, exactly one 256x256 weight: a bias beside it would overflow the
    # bucket, so each tensor gets its own, last layer's first.
    bias, weight = torch.Size([256]), torch.Size([256, 256])
    assert buckets0 == [[bias], [weight], [bias], [weight]]
    assert weights0 == weights1


def unused_parameter(rank: int, world_size: int) -> None:
    model = BucketedDDP(nn.ModuleDict({"used": nn.Linear(4, 4), "unused": nn.Linear(4, 4)}))
    model.module["used"](torch.randn(2, 4)).sum().backward()


def test_an_unused_parameter_raises_instead_of_hanging():
    with pytest.raises(RankFailed, match="never completed: some parameters got no gradient"):
        spawn_world(unused_parameter, 2, timeout_s=30)
