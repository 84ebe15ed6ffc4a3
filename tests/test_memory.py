"""distdocs.memory and `distdocs memory`: the ZeRO paper's accounting, and bad input."""

from __future__ import annotations

import pytest

from distdocs import cli
from distdocs.memory import GIB, activation_bytes, bytes_per_parameter, per_device_model_states, tensor_pipeline_split


@pytest.mark.parametrize(
    "precision, optimizer, total",
    [("fp32", "adam", 16), ("bf16-mixed", "adam", 16), ("fp32", "sgd", 12), ("bf16-mixed", "sgd", 12)],
)
def test_bytes_per_parameter(precision, optimizer, total):
    assert bytes_per_parameter(precision, optimizer).total == total


def test_reproduces_the_zero_paper_figure_1():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed precision Adam.
    states = bytes_per_parameter("bf16-mixed", "adam")
    gb = [per_device_model_states(7.5e9, states, s, 64) / 1e9 for s in ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"]]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


def test_activation_estimate():
    assert activation_bytes(layers=2, hidden=10, seq_len=3, micro_batch=4) == 34 * 3 * 4 * 10 * 2


def test_pipeline_parallelism_does_not_divide_the_first_stage_activations():
    states = bytes_per_parameter()
    assert tensor_pipeline_split(10, states, device_bytes=80) == (1, 2)  # 160 bytes of states, no activations
    # 60 bytes of activations: a pipeline alone leaves 20 bytes a device for states, so 8 stages;
    # tensor parallelism over 2 halves both (30 + 80/p <= 80: p = 2), 4 devices in all.
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=60) == (2, 2)
    # Activations larger than a device need tensor parallelism, whatever the pipeline.
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=100)[0] >= 2
    assert tensor_pipeline_split(10, states, device_bytes=80, activations=1000) is None


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
        ["--params", "7B", "--precision", "fp16"],
        ["--params", "7B", "--layers", "2"],
        ["--params", "7B", "--devices", "0"],
    ],
)
def test_bad_memory_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(["memory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


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
