"""distdocs.training.collectives.ring_allreduce (and the tree, naive and two-level allreduces) against
gloo's all_reduce: any length (0 and 1 included), any shape, float32, float64, int64 and bfloat16, world sizes 1 to 4,
and clear errors for bad input.

Hypothesis draws the cases in this process and sends each to long-lived ranks (distdocs.lab.world.World),
so that a failing case shrinks here while the ranks stay up.

Tolerance. Integers must be bitwise equal. Floats: two ways of adding the same n numbers in another
order each err by at most (n-1)·u·Σ|x| (u: the dtype's unit roundoff, 2^-24 for float32, 2^-53 for
float64, 2^-8 for bfloat16), so they may differ by twice that, element by element. A relative
tolerance on the result alone would fail wherever the sum cancels to near zero.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distdocs.lab.world import RankFailed, World
from distdocs.training.collectives import (
    naive_allreduce,
    node_groups,
    ring_allreduce,
    tree_allreduce,
    two_level_allreduce,
)

pytestmark = pytest.mark.processes  # the test tier: see the testing page

DTYPES = ["float32", "float64", "int64", "bfloat16"]
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53, "bfloat16": 2.0**-8}


def make_input(rank: int, shape: tuple[int, ...], dtype_name: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    if dtype_name == "int64":
        return torch.randint(-(2**40), 2**40, shape, generator=g)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(getattr(torch, dtype_name))


OURS = {"ring": ring_allreduce, "tree": tree_allreduce, "naive": naive_allreduce}


def ring_and_gloo(rank: int, world_size: int, shape, dtype_name: str, seed: int, impl: str = "ring"):
    x = make_input(rank, shape, dtype_name, seed)
    ours = OURS[impl](x.clone())
    theirs = x.clone()
    dist.all_reduce(theirs)
    magnitude = x.abs().double()
    dist.all_reduce(magnitude)
    return ours, theirs, magnitude


def assert_ring_matches_gloo(results, world_size: int, dtype_name: str) -> None:
    ours0 = results[0][0]
    for ours, theirs, magnitude in results:
        assert torch.equal(ours, ours0), "ranks disagree: the all-gather must give every rank the same bits"
        if dtype_name == "int64":
            assert torch.equal(ours, theirs)
        else:
            bound = 2 * max(world_size - 1, 1) * UNIT_ROUNDOFF[dtype_name] * magnitude
            err = (ours.double() - theirs.double()).abs()
            assert bool((err <= bound).all()), f"max error {err.max()} beyond the bound"


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"world{n}")
def world(request):
    with World(request.param, timeout_s=60) as w:
        yield w


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(0, 9), max_size=4).map(tuple),
    dtype_name=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_ring_equals_gloo_on_random_shapes(world, shape, dtype_name, seed):
    results = world.run(ring_and_gloo, shape, dtype_name, seed)
    assert_ring_matches_gloo(results, world.world_size, dtype_name)


@pytest.mark.parametrize("numel", [0, 1, 2, 3, 5, 7])
def test_ring_handles_lengths_below_and_around_the_world_size(world, numel):
    for dtype_name in DTYPES:
        assert_ring_matches_gloo(world.run(ring_and_gloo, (numel,), dtype_name, numel), world.world_size, dtype_name)


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(0, 9), max_size=3).map(tuple),
    dtype_name=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    impl=st.sampled_from(["tree", "naive"]),
)
def test_tree_and_naive_equal_gloo_too(world, shape, dtype_name, seed, impl):
    results = world.run(ring_and_gloo, shape, dtype_name, seed, impl)
    assert_ring_matches_gloo(results, world.world_size, dtype_name)


def test_ring_handles_large_tensors_with_uneven_chunks(world):
    # 3,000,001 float32s: about 11.4 MiB, in chunks that differ by one element.
    assert_ring_matches_gloo(world.run(ring_and_gloo, (3_000_001,), "float32", 1), world.world_size, "float32")


def non_contiguous_on_rank_1(rank: int, world_size: int) -> None:
    x = torch.ones(4, 6)
    ring_allreduce(x.t() if rank == 1 else x)


def different_sizes(rank: int, world_size: int) -> None:
    ring_allreduce(torch.ones(10 + rank))


@pytest.mark.parametrize(
    "fn, message",
    [(non_contiguous_on_rank_1, "needs a contiguous tensor on every rank"), (different_sizes, "different sizes")],
)
def test_bad_input_raises_on_every_rank_without_hanging(fn, message):
    with pytest.raises(RankFailed, match=message):
        with World(2, timeout_s=30) as w:
            w.run(fn)


def reused_workspace(rank: int, world_size: int) -> list[bool]:
    """Calls of growing and shrinking sizes share one receive buffer; every result must stay right."""
    results = []
    for numel in (10, 1000, 7, 100_000, 3):
        x = torch.full((numel,), float(rank + 1))
        results.append(bool((ring_allreduce(x) == world_size * (world_size + 1) / 2).all()))
    return results


def test_ring_reuses_its_receive_buffer_across_calls_of_any_size(world):
    assert all(all(r) for r in world.run(reused_workspace))


def two_level_and_gloo(rank: int, world_size: int, ranks_per_node: int, numel: int, dtype_name: str, seed: int):
    inside, across = node_groups(ranks_per_node)
    x = make_input(rank, (numel,), dtype_name, seed)
    stats: dict = {}
    ours = two_level_allreduce(x.clone(), inside, across, stats=stats)
    theirs = x.clone()
    dist.all_reduce(theirs)
    magnitude = x.abs().double()
    dist.all_reduce(magnitude)
    return ours, theirs, magnitude, stats


@pytest.mark.parametrize("numel", [0, 1, 5, 4 * 3 * 1000])
def test_two_level_equals_gloo_for_every_split_into_nodes(world, numel):
    """Ranks filling nodes of every size that divides the world (1 rank a node: a ring across; one node:
    a ring inside). Only the middle step leaves a node: each rank sends 2(N-1)/N * S/k bytes across,
    exactly, when k*N divides the length."""
    n = world.world_size
    for k in (k for k in range(1, n + 1) if n % k == 0):
        for dtype_name in ("int64", "float32"):
            results = world.run(two_level_and_gloo, k, numel, dtype_name, numel + k)
            assert_ring_matches_gloo([r[:3] for r in results], n, dtype_name)
            nodes, nbytes = n // k, numel * 8 if dtype_name == "int64" else numel * 4
            if numel and numel % n == 0:
                for *_, stats in results:
                    assert stats.get("bytes_between_nodes", 0) == 2 * (nodes - 1) * nbytes // (k * nodes), (k, stats)
