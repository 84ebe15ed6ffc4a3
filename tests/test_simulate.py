"""distdocs.calculators.sync_simulation, the lab's one-process simulation: the allreduce algorithms against the sum and
their byte counts against the formulas; shard gradients against the full batch; bad input."""

import pytest
import torch
from torch import nn

from distdocs.calculators.sync_simulation import (
    merge_gradients,
    shard_gradients,
    simulate_naive_allreduce,
    simulate_ring_allreduce,
    split_batch,
)

pytestmark = pytest.mark.fast  # the test tier: see the testing page


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8])
def test_both_allreduces_leave_the_exact_sum_on_every_worker(n):
    buffers = [torch.arange(4 * n, dtype=torch.float32) * (w + 1) for w in range(n)]  # whole numbers: exact sums
    expected = sum(buffers)
    for allreduce in (simulate_naive_allreduce, simulate_ring_allreduce):
        out, _ = allreduce(buffers)
        assert all(torch.equal(o, expected) for o in out), allreduce.__name__


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_sends_2_n_minus_1_over_n_of_the_buffer_in_2_n_minus_1_steps(n):
    buffers = [torch.ones(6 * n) for _ in range(n)]
    size = 6 * n * 4
    _, trace = simulate_ring_allreduce(buffers)
    assert trace.steps == 2 * (n - 1)
    assert trace.bytes_sent == [2 * (n - 1) * size // n] * n
    # After reduce-scatter, worker i holds the whole sum of chunk (i + 1) mod n; at the end, everything.
    everyone = tuple(range(n))
    assert all(trace.holdings[n - 1][w][(w + 1) % n] == everyone for w in range(n))
    assert all(h == everyone for row in trace.holdings[-1] for h in row)


def test_naive_root_sends_n_minus_1_buffers_and_the_others_one():
    _, trace = simulate_naive_allreduce([torch.ones(8) for _ in range(5)])
    assert trace.bytes_sent == [4 * 32, 32, 32, 32, 32] and trace.steps == 8


def test_equal_shards_average_to_the_full_batch_gradient_and_unequal_ones_need_weights():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = torch.randn(24, 4), torch.randn(24, 1)
    full = shard_gradients(model, nn.functional.mse_loss, [(x, y)])[0]
    equal = merge_gradients(shard_gradients(model, nn.functional.mse_loss, split_batch(x, y, [6, 6, 6, 6])))
    sizes = [18, 3, 2, 1]
    grads = shard_gradients(model, nn.functional.mse_loss, split_batch(x, y, sizes))
    for a, b in zip(equal, full):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)  # float32: only the summation order differs
    for a, b in zip(merge_gradients(grads, sizes), full):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert max((a - b).abs().max() for a, b in zip(merge_gradients(grads), full)) > 1e-3


def test_trace_table_shows_each_worker_and_chunk():
    _, trace = simulate_ring_allreduce([torch.ones(3) for _ in range(3)])
    lines = trace.table(trace.steps).splitlines()
    assert lines[0].split() == ["worker", "chunk", "0", "chunk", "1", "chunk", "2"]
    assert [ln.split() for ln in lines[1:]] == [[str(w), "all", "all", "all"] for w in range(3)]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: simulate_ring_allreduce([torch.ones(4)]), "at least 2"),
        (lambda: simulate_ring_allreduce([torch.ones(4), torch.ones(5)]), "one shape"),
        (lambda: simulate_ring_allreduce([torch.ones(5)] * 3), "3 equal chunks"),
        (lambda: simulate_naive_allreduce([torch.ones(2, 2)] * 2), "1-D"),
        (lambda: split_batch(torch.ones(4, 2), torch.ones(4, 1), [2, 1]), "add up to the batch of 4"),
        (lambda: split_batch(torch.ones(4, 2), torch.ones(3, 1), [2, 2]), "same number of samples"),
        (lambda: merge_gradients([[torch.ones(1)]] * 2, weights=[1]), "2 positive numbers"),
    ],
)
def test_bad_input_says_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
