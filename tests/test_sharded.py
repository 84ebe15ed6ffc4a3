"""docs/lesson/sharded-data-parallelism.md. examples/sharded/step03_clip_precision_frozen.py clips
sharded gradients, computes in bf16 under a MixedPrecisionPolicy, and trains with a frozen first layer,
each against one process on the whole batch. The run's printed evidence holds the page's sentences:
dtypes and placements, the bytes DDP syncs (counted by a communication hook, the same on any
machine), and differences at float32's tolerance or bitwise where the arithmetic is the same."""

from __future__ import annotations

import importlib.util
import re

import pytest

from docexec.fences import REPO, example_command

PAGE = "docs/lesson/sharded-data-parallelism.md"
SCRIPT = REPO / "examples/sharded/step03_clip_precision_frozen.py"
FLOAT32_ATOL = 1e-5  # torch.testing.assert_close's absolute tolerance for float32: rounding, on any CPU

EVIDENCE = re.compile(
    r"clip: gradients (?P<grad_type>\w+) \((?P<grad_placement>[^)]*\)),\), norm (?P<norm_type>\w+) "
    r"\((?P<norm_placement>[^)]*\)),\)\n"
    r"clip: total norm (?P<norm>[\d.]+) before clipping, max_norm (?P<max_norm>[\d.]+)\n"
    r"clip: max \|FSDP - one process\| = (?P<norm_diff>\S+) for the norm, (?P<clip_diff>\S+) for the gradients\n"
    r"precision: layer 0 computes with torch\.(?P<compute>\w+) weights; the optimizer steps "
    r"torch\.(?P<master>\w+) (?P<master_type>\w+) shards\n"
    r"precision: the gradients it gets are torch\.(?P<grads>\w+) (?P<grads_type>\w+) shards\n"
    r"precision: max \|step - one process\| = (?P<replay_diff>\S+) replaying the policy, "
    r"(?P<fp32_diff>\S+) in float32\n"
    r"frozen: layer 0 weight (?P<frozen_type>\w+) \((?P<frozen_placement>[^)]*\)),\), grad (?P<frozen_grad>\w+)\n"
    r"frozen: the optimizer holds (?P<held>\d+) of (?P<params>\d+) parameters\n"
    r"frozen: max \|trained - one process\| = (?P<trained_diff>\S+)\n"
    r"frozen: DDP all-reduced (?P<synced>\d+) bytes a step; trainable (?P<trainable>\d+), whole model (?P<whole>\d+)\n"
    r"self-check passed"
)


def frozen_model_bytes() -> tuple[int, int]:
    """The example's own model, built here in one process (the file imports torch alone and runs nothing
    on import): the bytes of its trainable parameters and of all of them."""
    spec = importlib.util.spec_from_file_location("step03_clip_precision_frozen", SCRIPT)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    params = list(example.make_model(frozen_first=True).parameters())
    nbytes = lambda ps: sum(p.numel() * p.element_size() for p in ps)  # noqa: E731
    return nbytes(p for p in params if p.requires_grad), nbytes(params)


@pytest.mark.processes
@pytest.mark.holds(
    PAGE,
    "Its gradients are `DTensor` shards, and the total norm it returns is a replicated `DTensor`: the norm of "
    "the whole model's gradient, the same on every rank.",
)
@pytest.mark.holds(
    PAGE,
    "The sharded parameters that the optimizer steps stay float32, the master weights, sharded like everything "
    "else; forward and backward compute with bf16 weights; and the gradients are cast to float32 before they are "
    "averaged, so the optimizer gets float32 shards.",
)
@pytest.mark.holds(
    PAGE,
    "At two ranks the step equals, bit for bit, one process that does what the policy does: each half-batch in "
    "bf16 with bf16 weights, the two gradients cast to float32 and averaged.",
)
@pytest.mark.holds(PAGE, "A frozen layer stays sharded, and its gradient stays `None`.")
@pytest.mark.holds(
    "docs/multi-gpu/convert-your-script.md",
    "need no flag: DDP syncs only the parameters that require gradients.",
)
@pytest.mark.holds(
    PAGE,
    "DDP all-reduces only the parameters that require a gradient: the bytes it syncs are the trainable "
    "parameters', not the whole model's.",
)
def test_clipping_mixed_precision_and_frozen_layers_match_one_process(command_runs):
    """The page's run at 2 ranks (the docstring's launch, shared with the page and test_examples.py)."""
    out = command_runs.run_ok(example_command(SCRIPT)).stdout
    found = EVIDENCE.search(out)
    assert found, out
    e = found.groupdict()

    # Clipping: sharded gradients, a replicated norm that is the whole model's, and clipping that happened.
    assert (e["grad_type"], e["grad_placement"]) == ("DTensor", "Shard(dim=0)"), out
    assert (e["norm_type"], e["norm_placement"]) == ("DTensor", "Replicate()"), out
    assert float(e["norm"]) > float(e["max_norm"]), out
    assert float(e["norm_diff"]) <= FLOAT32_ATOL and float(e["clip_diff"]) <= FLOAT32_ATOL, out

    # Mixed precision: bf16 compute, float32 master shards and gradients; bitwise equal to the policy's replay
    # (the same bf16 arithmetic on the same half-batches), further from plain float32.
    assert e["compute"] == "bfloat16", out
    assert (e["master"], e["master_type"], e["grads"], e["grads_type"]) == ("float32", "DTensor") * 2, out
    assert float(e["replay_diff"]) == 0.0 < float(e["fp32_diff"]), out

    # Frozen: sharded, no gradient, out of the optimizer; the rest trains as one process does.
    assert (e["frozen_type"], e["frozen_placement"], e["frozen_grad"]) == ("DTensor", "Shard(dim=0)", "None"), out
    assert (int(e["held"]), int(e["params"])) == (4, 6), out
    assert float(e["trained_diff"]) <= FLOAT32_ATOL, out

    # DDP syncs the trainable parameters' bytes, counted by its hook, and not the frozen layer's.
    trainable, whole = frozen_model_bytes()
    assert (int(e["synced"]), int(e["trainable"]), int(e["whole"])) == (trainable, trainable, whole), out
    assert trainable < whole, out
