# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab: simulate data-parallel sync
#
# Data parallelism in three steps, each small enough to print: workers that train on shards of a
# batch, the allreduce that merges their gradients, and the cost model that says when that merge,
# not the computation, sets the pace. The last step then measures your own machine and sets the
# measurement next to the prediction.
#
# The notebook runs in well under a minute on 2 CPU cores, with `pip install -e .` from the
# repository (it imports `distdocs`). Download it with the button at the top of the page, or run
# it as a script: `python docs/lab/simulate-data-parallel-sync.py`.

# %%
import os

import torch
from torch import nn

from distdocs.simulate import merge_gradients, naive_allreduce, ring_allreduce, shard_gradients, split_batch

torch.manual_seed(0)
torch.set_num_threads(1)  # the measurements in step 3 compare one-thread ranks with one thread

# %% [markdown]
# ## Step 1: workers train on shards
#
# Four workers share a batch of 64 samples, 16 each. Each computes the gradient of the mean loss on
# its own shard, with the same weights. Averaging the four gradients gives the gradient of the mean
# loss on the whole batch, which is why data parallelism trains the same model as one process.

# %%
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
x, y = torch.randn(64, 8), torch.randn(64, 1)
loss_fn = nn.functional.mse_loss

full = shard_gradients(model, loss_fn, [(x, y)])[0]  # one worker, the whole batch
equal = shard_gradients(model, loss_fn, split_batch(x, y, [16, 16, 16, 16]))
merged = merge_gradients(equal)
print(
    "max |average of 4 shard gradients - full-batch gradient| =",
    f"{max((a - b).abs().max().item() for a, b in zip(merged, full)):.0e}",
)

# %% [markdown]
# The difference is rounding: the same sums, added in another order. Now let the shards differ
# in size, as they do when a dataset does not divide evenly among workers.

# %%
sizes = [40, 12, 8, 4]
unequal = shard_gradients(model, loss_fn, split_batch(x, y, sizes))
plain = merge_gradients(unequal)
weighted = merge_gradients(unequal, weights=sizes)
gap = lambda grads: max((a - b).abs().max().item() for a, b in zip(grads, full))  # noqa: E731
print(f"unequal shards {sizes}:")
print(f"  plain average:              max difference from the full batch {gap(plain):.0e}")
print(f"  weighted by shard size:     max difference from the full batch {gap(weighted):.0e}")

# %% [markdown]
# The plain average gives a worker with 4 samples as much say as one with 40: each of its samples
# counts ten times as much, and the merged gradient is no longer the batch's. Weighting each
# gradient by its shard's size restores it.

# %%
# Self-check. float32 tolerance: the sums differ only in order, so 1e-6 relative is plenty.
for a, b in zip(merged, full):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
for a, b in zip(weighted, full):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
assert gap(plain) > 100 * gap(weighted), "the plain average of unequal shards should be visibly off"
print("step 1 self-check passed")

# %% [markdown]
# **Exercise.** DDP averages gradients with equal weights, yet its results equal one process's. How
# does PyTorch keep the shards equal, and what does it do with the samples left over?
#
# <details><summary>Solution</summary>
#
# `DistributedSampler` gives every rank the same number of samples: by default it pads the last
# shards by repeating samples from the start of the dataset (so a few samples count twice in that
# epoch), or, with `drop_last=True`, it drops the remainder. Either way every rank's batch has the
# same size, and the plain average is the right one.
#
# </details>
#
# **What you learned**
#
# - Averaging the shard gradients of equal shards gives the full batch's gradient.
# - Unequal shards need weights: each gradient times its share of the samples.
# - DDP assumes equal shards; the sampler makes them equal.

# %% [markdown]
# ## Step 2: the allreduce merge
#
# The workers must end with the same merged gradient. An *allreduce* gives every worker the sum of
# everyone's buffers. The naive way sends everything to one worker, which adds and sends back; the
# ring cuts each buffer into n chunks and passes chunks around a ring, first adding
# (reduce-scatter), then copying the finished sums (all-gather).
#
# Four workers, each with a buffer of 8 numbers. Whole numbers, so that the sums are exact and the
# check can be bitwise.

# %%
n = 4
buffers = [torch.arange(8, dtype=torch.float32) + 100 * w for w in range(n)]
expected = sum(buffers)
naive_out, naive_trace = naive_allreduce(buffers)
ring_out, ring_trace = ring_allreduce(buffers)
for step in range(ring_trace.steps + 1):
    phase = "start" if step == 0 else "reduce-scatter" if step < n else "all-gather"
    print(f"ring, after step {step} ({phase}): which workers' data each chunk sums")
    print(ring_trace.table(step), end="\n\n")

# %% [markdown]
# After n − 1 = 3 reduce-scatter steps each worker owns one finished chunk (`all`); after 3 more,
# every worker has every chunk. Now count what each worker sent.

# %%
S = buffers[0].numel() * buffers[0].element_size()
print(f"buffer size S = {S} bytes, n = {n} workers")
print(f"ring:  {ring_trace.steps} steps, bytes sent per worker {ring_trace.bytes_sent}")
print(f"       2(n-1)/n * S = {2 * (n - 1) * S // n}")
print(f"naive: {naive_trace.steps} steps, bytes sent per worker {naive_trace.bytes_sent}")
print(f"       worker 0 sends (n-1) * S = {(n - 1) * S}")

# %%
# How the busiest worker's traffic grows with n: the ring's stays under 2S, the naive root's does not.
print(f"{'n':>3} {'ring, per worker':>17} {'naive, worker 0':>16}   (in units of S)")
for workers in (2, 4, 8, 16):
    bufs = [torch.ones(16 * workers) for _ in range(workers)]
    size = bufs[0].numel() * 4
    ring_most = max(ring_allreduce(bufs)[1].bytes_sent) / size
    naive_most = max(naive_allreduce(bufs)[1].bytes_sent) / size
    print(f"{workers:>3} {ring_most:>17.3f} {naive_most:>16.0f}")

# %%
# Self-check: both give every worker the exact sum; the counts match the formulas.
for out in (naive_out, ring_out):
    assert all(torch.equal(o, expected) for o in out)
assert ring_trace.steps == 2 * (n - 1)
assert all(b == 2 * (n - 1) * S // n for b in ring_trace.bytes_sent)
assert naive_trace.bytes_sent[0] == (n - 1) * S and all(b == S for b in naive_trace.bytes_sent[1:])
print("step 2 self-check passed")

# %% [markdown]
# **Exercise.** With 8 workers, how many steps does the ring take, and how many bytes does each
# worker send for a 1 MiB buffer? Check your answer with `ring_allreduce`.
#
# <details><summary>Solution</summary>
#
# 2(n − 1) = 14 steps: 7 of reduce-scatter, 7 of all-gather. Each step sends one chunk of
# 1 MiB / 8, so each worker sends 14 / 8 = 1.75 MiB: `max(trace.bytes_sent) / 2**20` prints 1.75
# for `ring_allreduce([torch.ones(2**18) for _ in range(8)])` (2**18 floats are 1 MiB).
#
# </details>
#
# **What you learned**
#
# - An allreduce leaves the sum on every worker; the ring does it in 2(n − 1) steps.
# - Each ring worker sends 2(n − 1)/n × S bytes: under 2S however many workers there are.
# - The naive root sends (n − 1) × S: it becomes the bottleneck as n grows.

# %% [markdown]
# ## Step 3: sync-bound against compute-bound, on this machine
#
# A step costs the computation on one worker's batch plus the part of the allreduce that does not
# hide behind it (the overview's
# kitchen explains why that sets the speedup). `distdocs.costmodel` writes the two down; `simulate()`
# evaluates them at many n. Here you fit the model to this machine and set it beside a measurement.
#
# First, this machine's α and β: time gloo's `all_reduce` between two processes at four sizes and
# fit the line time = 2(n − 1)α + 2(n − 1)/n × S × β through the points.

# %%
import json
import subprocess
import sys

from distdocs.costmodel import fit_alpha_beta


def distdocs(*args: str) -> dict:
    """Run the distdocs command line in a fresh process and return its --json output."""
    out = subprocess.run(
        [sys.executable, "-m", "distdocs.cli", *args, "--json"], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


sweep = distdocs("bench", "allreduce", "--world-sizes", "2", "--sizes", "256K,1M,4M,16M", "--iters", "5")
fit = fit_alpha_beta(sweep["records"], "gloo")
net = fit.network
print(
    f"{sweep['machine']['cpu']}, {sweep['machine']['cores']} cores: alpha = {net.alpha * 1e6:.0f} us per message, "
    f"bandwidth 1/beta = {net.gb_per_s:.2f} GB/s (relative RMS error of the fit {fit.relative_rms:.0%})"
)

# %% [markdown]
# Next, two models at two sizes of world: a *compute-heavy* one (four layers of width 256, 1024
# samples per rank: 1 MiB of gradients and lots of arithmetic) and a *sync-heavy* one (eight layers
# of width 1024, 8 samples per rank: 32 MiB of gradients and little arithmetic). `distdocs bench
# scaling` trains each with DDP and times every step twice: as it is, and under `no_sync()`, which
# gives the computation alone. The model takes its computation per sample from the whole 1-rank
# step: what DDP does there (copying gradients into its buckets) it does at every size.

# %%
cores = os.cpu_count() or 1
sizes = list(range(1, min(cores, 4) + 1))
run = distdocs("bench", "scaling", "--world-sizes", ",".join(map(str, sizes)), "--accumulation", "1", "--steps", "4")
measured = {(r["model"], r["world_size"]): r for r in run["records"]}
for r in run["records"]:
    print(
        f"{r['model']:>13} at {r['world_size']} ranks: step {r['step_s'] * 1e3:6.1f} ms, "
        f"of which computation {r['compute_s'] * 1e3:6.1f} ms; speedup {r['speedup']:.2f}x"
    )

# %% [markdown]
# One more fact about this machine before predicting: on a CPU, each rank has a core or less, and
# the allreduce's arithmetic and copying need that same core. So communication does not overlap the
# backward pass here as it does on a GPU, whose copy engines and network card work while the
# kernels run; the model is told so (`overlap=False`). Now the prediction for 1 to 16 workers,
# and the measurement beside it.

# %%
import matplotlib.pyplot as plt

from distdocs.costmodel import simulate, workload_from_scaling

workers = [1, 2, 4, 8, 16]
fig, ax = plt.subplots(figsize=(6.4, 4.2))
ax.plot(workers, workers, color="0.6", linestyle="--", label="ideal")
predicted = {}
for name, style in (("compute-bound", "o-"), ("sync-bound", "s-")):
    one = measured[name, 1]
    work = workload_from_scaling(one)  # the whole 1-rank step as computation; no overlap on CPU
    steps = simulate(work, workers, net)
    predicted[name] = {s.world_size: s for s in steps}
    (line,) = ax.plot(workers, [s.speedup for s in steps], style, label=f"{name}: model")
    ax.plot(
        sizes,
        [measured[name, n]["speedup"] for n in sizes],
        "D",
        color=line.get_color(),
        markersize=9,
        fillstyle="none",
        label=f"{name}: measured",
    )
    bound = [s for s in steps if s.exposed_sync > s.compute]
    if bound:  # where the sync outgrows the computation
        ax.axvline(bound[0].world_size, color=line.get_color(), linestyle=":", linewidth=1)
        ax.annotate(
            f"{name}: sync > compute",
            (bound[0].world_size, bound[0].speedup),
            xytext=(5, 5),
            textcoords="offset points",
            fontsize=8,
            color=line.get_color(),
        )
ax.set(xscale="log", yscale="log", xlabel="workers", ylabel="speedup in samples/s over 1 worker")
ax.set_xticks(workers, [str(n) for n in workers])
ax.minorticks_off()
ax.legend(fontsize=8)
machine = run["machine"]
ax.set_title(
    f"model against measurement: {machine['cpu']}, {cores} cores, torch {machine['torch']}, {machine['date']}",
    fontsize=8,
)
fig.tight_layout()
if "ipykernel" in sys.modules:  # in Jupyter (and on the site): show it, with a text alternative
    import base64
    import io

    from IPython.display import HTML, display

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    alt = (
        "Speedup against workers on log scales: the model's curves for the compute-bound and the sync-bound "
        "model, this machine's measured speedups as open diamonds, the ideal line dashed, and a dotted line "
        "where each model's sync outgrows its computation."
    )
    display(HTML(f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png.getvalue()).decode()}">'))
plt.close(fig)

# %%
from distdocs.bench.prediction import compare

for r in compare(run["records"], net):
    if r["world_size"] > 1:
        print(f"{r['model']} at {r['world_size']} ranks: predicted / measured step time = {r['ratio']:.2f}")

# %% [markdown]
# The sync-heavy model's curve bends over at once: its 32 MiB allreduce costs more than its few
# samples' arithmetic, and more workers only add ranks to the ring. The compute-heavy model follows
# the ideal line much further. Where the model and the measurement part, the model leaves something
# out: DDP copies the gradients into its buckets and back, which a bare allreduce does not, and ranks
# that share one machine's memory slow each other's computation down.

# %%
# Self-check: in the model, the compute-heavy model scales better, and the sync-heavy model's
# allreduce, 32 times the bytes, takes longer at every number of workers. (The measured speedups
# are printed, not asserted: on a busy machine they move, and timings belong to benchmarks.)
assert predicted["compute-bound"][2].speedup > predicted["sync-bound"][2].speedup
assert all(predicted["sync-bound"][n].sync > predicted["compute-bound"][n].sync for n in workers[1:])
print("step 3 self-check passed")

# %% [markdown]
# ### How good is the model? A saved comparison
#
# `distdocs bench prediction` does the same comparison more carefully, with and without
# accumulation; the saved run below names its machine in its first line. The model's
# inputs come from other runs than the one predicted: the computation per sample and DDP's own work
# per sync from the 1-rank run, α and β from an allreduce sweep. The last two columns split any
# miss into its two terms: the computation at n ranks against at 1, and the sync that DDP paid
# against the α-β allreduce of the same bytes.

# %%
from pathlib import Path

saved = next(
    p / "benchmarks/prediction-cpu.txt"
    for p in [Path.cwd(), *Path.cwd().parents]
    if (p / "benchmarks/prediction-cpu.txt").exists()
)
print(saved.read_text())

# %% [markdown]
# At one rank the prediction is the measurement by construction. At two, the model comes in short,
# and the columns say where. Two ranks on one CPU slow each other's computation down: they share
# its memory bandwidth and caches, which no term of the model describes. And the sync that DDP
# pays is longer than a bare allreduce of the same bytes: DDP copies each gradient into its bucket
# and back and divides by the world size, passes over the whole gradient that the α-β model leaves
# out (`gradient_as_bucket_view=True` saves the copy back). With the computation measured at two
# ranks in place of the 1-rank one (the last column), the prediction comes closer; what remains is
# the sync term. Those two terms, not α or β, are what a better CPU model would add.

# %% [markdown]
# Over a network the same comparison holds, link by link: the gradient accumulation page measures
# this compute-heavy model over a 1 Gbit/s and a 100 Mbit/s link, where two nodes at one micro-batch
# per step are slower than one, and accumulation wins it back.

# %% [markdown]
# **Exercise.** With the same network, how many samples per rank would the sync-heavy model need
# for its 2-rank speedup to reach 1.8? Use `simulate()` with larger `micro_batch` values.
#
# <details><summary>Solution</summary>
#
# Speedup at 2 = 2 × compute / (compute + sync), which is 1.8 when the computation is 9 times the
# sync. The sync does not change with the batch, so multiply the samples per rank until the
# computation is 9 × the sync printed by `simulate(work, [2], net)[0].sync`: a loop over
# `micro_batch` in 8, 16, 32, ... finds it. Accumulating micro-batches under `no_sync()` has the
# same effect without the memory of a larger batch.
#
# </details>
#
# **What you learned**
#
# - A step is computation plus the sync that does not hide; only the computation shrinks per sample
#   as workers are added.
# - The α-β model, fitted to a few allreduce timings, predicts where a model turns sync-bound.
# - On CPUs the sync does not overlap the backward pass; on GPUs it mostly does, and the model says
#   how much.
