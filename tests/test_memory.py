"""distdocs.calculators.memory and `distdocs memory`, as docs/lesson/choosing-a-strategy.md uses them: the ZeRO
paper's accounting, held to three outside counts (the paper's Figure 1, Megatron-LM's distributed
optimizer guide, DeepSpeed's own estimators) and to what FSDP2 keeps on each rank; and bad input."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from distdocs import cli
from distdocs.calculators.memory import (
    GIB,
    SHARDED,
    activation_bytes,
    activation_split,
    bytes_per_parameter,
    per_device_model_states,
    tensor_pipeline_split,
)
from distdocs.lab.world import spawn_world


@pytest.mark.parametrize(
    "precision, optimizer, total",
    [
        ("fp32", "adam", 16),
        ("autocast", "adam", 16),
        ("bf16-master", "adam", 16),
        ("bf16-fp32-grads", "adam", 18),  # Megatron-LM's bf16
        ("bf16-master-fp32-grads", "adam", 20),  # the Ultra-Scale Playbook's figure, DeepSpeed's count
        ("fp32", "sgd", 12),
        ("bf16-master", "sgd", 12),
    ],
)
@pytest.mark.fast
def test_bytes_per_parameter(precision, optimizer, total):
    assert bytes_per_parameter(precision, optimizer).total == total


@pytest.mark.fast
def test_the_layouts_agree_in_total_but_not_in_what_zero_1_and_2_leave_whole():
    # 1000 parameters on 10 devices: autocast keeps fp32 weights and gradients whole under ZeRO-1
    # (4 + 4 + 8/10 = 8.8 B a parameter), bf16-master keeps 16-bit ones (2 + 2 + 12/10 = 5.2 B); under
    # ZeRO-2 the weights alone stay whole (4 + 12/10 = 5.2 B against 2 + 14/10 = 3.4 B).
    per = {
        layout: [per_device_model_states(1000, bytes_per_parameter(layout), s, 10) for s in SHARDED]
        for layout in ("autocast", "bf16-master")
    }
    assert per["autocast"] == pytest.approx([16000, 8800, 5200, 1600])
    assert per["bf16-master"] == pytest.approx([16000, 5200, 3400, 1600])


# Three model sizes and device counts, as DeepSpeed's docs use them: params, largest layer, devices.
DEEPSPEED_CASES = [(125e6, 50e6, 8), (7e9, 262e6, 64), (70e9, 1.07e9, 512)]


@pytest.mark.fast
@pytest.mark.parametrize("params, largest_layer, devices", DEEPSPEED_CASES)
def test_zero_figures_match_deepspeeds_own_estimators(params, largest_layer, devices):
    """DeepSpeed's estimators count the fp32-gradient layout: ZeRO-2 exactly as we do (2 bytes of bf16
    weights whole, 18 sharded), ZeRO-3 as 18 sharded bytes plus the largest layer gathered in 16 bits
    with its gradient (4 bytes a parameter of that layer). We count 20 sharded bytes: DeepSpeed leaves
    out the bf16 weights' own shard (2/n), and the transient layer is not a model state."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    states = bytes_per_parameter("bf16-master-fp32-grads", "adam")
    _, ds_zero2 = estimate_zero2_model_states_mem_needs(int(params), num_gpus_per_node=devices, cpu_offload=False)
    assert ds_zero2 == pytest.approx(per_device_model_states(params, states, "ZeRO-2", devices), abs=1)
    _, ds_zero3, _ = estimate_zero3_model_states_mem_needs(
        int(params), int(largest_layer), num_gpus_per_node=devices, cpu_offload=False
    )
    ours = per_device_model_states(params, states, "ZeRO-3/FSDP", devices)
    assert ds_zero3 == pytest.approx(ours - 2 * params / devices + 4 * largest_layer, abs=1)


def fsdp2_autocast_bytes(rank: int, world_size: int) -> tuple:
    """One Adam step of FSDP2 with bf16 compute: the dtypes and bytes this rank keeps between steps."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))  # 676 parameters
    fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)), mp_policy=MixedPrecisionPolicy(torch.bfloat16))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(8, 16)).float().square().mean().backward()
    opt.step()
    shards = [p.to_local() for p in model.parameters()] + [p.grad.to_local() for p in model.parameters()]
    adam = [t.to_local() for state in opt.state.values() for t in state.values() if t.dim() > 0]
    dtypes = {str(t.dtype) for t in shards}
    return dtypes, sum(t.numel() * t.element_size() for t in shards + adam), sum(p.numel() for p in model.parameters())


@pytest.mark.processes
def test_fsdp2_with_bf16_compute_keeps_the_autocast_layout_between_steps():
    """MixedPrecisionPolicy(param_dtype=bf16) computes in bf16 but keeps fp32 sharded parameters and
    gradients, so the calculator's `autocast` layout under FSDP is what a rank holds, byte for byte."""
    for dtypes, held, params in spawn_world(fsdp2_autocast_bytes, 2):
        assert dtypes == {"torch.float32"}
        assert held == per_device_model_states(params, bytes_per_parameter("autocast"), "ZeRO-3/FSDP", 2)


@pytest.mark.fast
def test_reproduces_the_zero_paper_figure_1():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed precision Adam.
    states = bytes_per_parameter("bf16-master", "adam")
    gb = [per_device_model_states(7.5e9, states, s, 64) / 1e9 for s in ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"]]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.fast
@pytest.mark.parametrize("devices", [1, 2, 8, 64])
def test_reproduces_megatron_lms_distributed_optimizer_table(devices):
    """Megatron-Core's guide to its distributed optimizer (docs.nvidia.com/megatron-core, "Distributed
    Optimizer") documents the bytes a parameter costs with Adam, whole and with the optimizer sharded
    over d data-parallel ranks: bf16 parameters with fp32 gradients 18 and 6 + 12/d, fp32 16 and 8 + 8/d."""
    for layout, whole, kept, sharded in [("bf16-fp32-grads", 18, 6, 12), ("fp32", 16, 8, 8)]:
        states = bytes_per_parameter(layout, "adam")
        assert states.total == whole
        assert per_device_model_states(1, states, "ZeRO-1", devices) == pytest.approx(kept + sharded / devices)


@pytest.mark.fast
def test_tensor_parallelism_leaves_10_of_the_34_sbh_whole_unless_sequence_parallelism_splits_them():
    """Korthikanti et al. 2022, section 4.2: with tensor parallelism over t a layer keeps
    s·b·h·(10 + 24/t) bytes (selective recomputation), with sequence parallelism too s·b·h·34/t."""
    s, b, h, layers = 3, 4, 10, 2
    split, whole = activation_split(layers, h, s, b)
    assert (split, whole) == (24 * s * b * h * layers, 10 * s * b * h * layers)
    states, device = bytes_per_parameter(), 80 * GIB
    acts = activation_split(80, 8192, 4096, 1)  # the 70B example: 85 GiB in all
    assert tensor_pipeline_split(70e9, states, device, acts[0], whole=acts[1]) == (8, 2)
    # without sequence parallelism 25 GiB stay on every device, and the states need a third stage
    assert tensor_pipeline_split(70e9, states, device, acts[0], whole=acts[1], sequence_parallel=False) == (8, 3)


@pytest.mark.fast
def test_activation_estimate():
    assert activation_bytes(layers=2, hidden=10, seq_len=3, micro_batch=4) == 34 * 3 * 4 * 10 * 2


@pytest.mark.fast
def test_pipeline_parallelism_does_not_divide_the_first_stage_activations():
    states = bytes_per_parameter()
    assert tensor_pipeline_split(10, states, device_bytes=80) == (1, 2)  # 160 bytes of states, no activations
    # 60 bytes of activations: a pipeline alone leaves 20 bytes a device for states, so 8 stages;
    # tensor parallelism over 2 halves both (30 + 80/p <= 80: p = 2), 4 devices in all.
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=60) == (2, 2)
    # Activations larger than a device need tensor parallelism, whatever the pipeline.
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=100)[0] >= 2
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=1000) is None


@pytest.mark.fast
def test_the_70b_example_needs_16_devices_as_tp_8_by_pp_2():
    # 70 B in bf16 with Adam (1043 GiB of states) and 85 GiB of activations on 80 GiB devices:
    # TP 8 leaves 80 - 85/8 = 69.4 GiB a device for 1043/8 GiB of states, so 2 stages.
    acts = activation_bytes(layers=80, hidden=8192, seq_len=4096, micro_batch=1)
    assert tensor_pipeline_split(70e9, bytes_per_parameter(), 80 * GIB, acts) == (8, 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["--params", "abc"],
        ["--params", "0"],
        ["--params", "7B", "--precision", "bf16-mixed"],
        ["--params", "7B", "--layers", "2"],
        ["--params", "7B", "--devices", "0"],
        ["--params", "7B", *"--layers 2 --hidden 8 --seq-len 4 --micro-batch 1 --recompute none".split()],
        ["--params", "7B", *"--layers 2 --hidden 8 --seq-len 4 --micro-batch 1 --recompute some".split()],
        ["--params", "7B", *"--layers 2 --hidden 8 --seq-len 4 --micro-batch 1 --heads -3".split()],
        ["--params", "7B", "--recompute", "full"],  # a setting for an estimate that was not asked for
        ["--params", "7B", "--recompute", "some"],
    ],
)
@pytest.mark.fast
def test_bad_memory_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(["memory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


@pytest.mark.fast
def test_cluster_lays_the_job_out_as_tensor_pipeline_and_data_degrees(capsys):
    from distdocs import cli

    argv = ["memory", "--params", "70B", "--layers", "80", "--hidden", "8192", "--seq-len", "4096"]
    assert cli.main([*argv, "--micro-batch", "1", "--cluster", "1000"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    # TP 8 x PP 2 = 16 devices a replica; 1000 // 16 = 62 replicas, 1000 - 62 * 16 = 8 left over.
    assert last == "on 1000 devices: TP 8 x PP 2 x DP 62 (data-parallel replicas of 16 devices), 8 devices left over"
    assert cli.main([*argv, "--micro-batch", "1", "--cluster", "8"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "on 8 devices: too few for one replica, which needs 16"
    assert cli.main([*argv, "--micro-batch", "1", "--cluster", "0"]) == 2
