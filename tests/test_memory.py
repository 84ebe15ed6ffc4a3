"""distdocs.memory and `distdocs memory`: the ZeRO paper's accounting, and bad input."""

from __future__ import annotations

import pytest

from distdocs import cli
from distdocs.memory import (activation_bytes, bytes_per_parameter, devices_to_fit,
                             per_device_model_states)


@pytest.mark.parametrize("precision, optimizer, total", [("fp32", "adam", 16), ("bf16-mixed", "adam", 16),
                                                         ("fp32", "sgd", 12), ("bf16-mixed", "sgd", 12)])
def test_bytes_per_parameter(precision, optimizer, total):
    assert bytes_per_parameter(precision, optimizer).total == total


def test_reproduces_the_zero_paper_figure_1():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed precision Adam.
    states = bytes_per_parameter("bf16-mixed", "adam")
    gb = [per_device_model_states(7.5e9, states, s, 64) / 1e9 for s in ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"]]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]


def test_activation_estimate_and_devices_to_fit():
    assert activation_bytes(layers=2, hidden=10, seq_len=3, micro_batch=4) == 34 * 3 * 4 * 10 * 2
    states = bytes_per_parameter()
    assert devices_to_fit(10, states, device_bytes=80) == 2  # 160 bytes of states on 80-byte devices
    assert devices_to_fit(10, states, device_bytes=80, activations=1) == 3


@pytest.mark.parametrize("argv", [["--params", "abc"], ["--params", "0"], ["--params", "7B", "--precision", "fp16"],
                                  ["--params", "7B", "--layers", "2"], ["--params", "7B", "--devices", "0"]])
def test_bad_memory_arguments_get_one_line_and_exit_2(argv, capsys):
    assert cli.main(["memory", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
