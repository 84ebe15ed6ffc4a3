"""How much memory training a model needs, and what sharding or splitting does to it.

Model states per parameter, in bytes (the accounting of the ZeRO paper, Rajbhandari et al. 2020):

| precision | weights | gradients | master weights | optimizer (Adam: m, v; SGD: momentum) |
|---|---|---|---|---|
| fp32 | 4 | 4 | - | 8 (Adam) or 4 (SGD) |
| bf16-mixed | 2 | 2 | 4 (fp32) | 8 (Adam) or 4 (SGD), in fp32 |

So Adam costs 16 bytes per parameter in both: mixed precision saves activation memory and time, not
model-state memory.

Activations are an estimate, for a transformer with 16-bit activations and FlashAttention-style
attention (no s x s score matrix kept): about 34·s·b·h bytes per layer for sequence length s,
micro-batch b and hidden size h (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", without the 5·a·s/h attention term). Real frameworks keep more or less
depending on recomputation, fused kernels and buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1 << 30
PRECISIONS = ("fp32", "bf16-mixed")
OPTIMIZERS = {"adam": 8, "sgd": 4}  # fp32 optimizer-state bytes per parameter
# What each data-parallel strategy divides by the number of devices n (ZeRO stages; FSDP = stage 3).
# The ZeRO paper counts fp32 master weights as optimizer state, so stage 1 shards them too.
SHARDED = {
    "DDP": (),
    "ZeRO-1": ("master weights", "optimizer"),
    "ZeRO-2": ("master weights", "optimizer", "gradients"),
    "ZeRO-3/FSDP": ("master weights", "optimizer", "gradients", "weights"),
}


@dataclass(frozen=True)
class ModelStates:
    """Bytes per parameter of each kind of model state."""

    weights: int
    gradients: int
    master_weights: int
    optimizer: int

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights, "gradients": self.gradients,
                "master weights": self.master_weights, "optimizer": self.optimizer}

    @property
    def total(self) -> int:
        return sum(self.parts().values())


def bytes_per_parameter(precision: str = "bf16-mixed", optimizer: str = "adam") -> ModelStates:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}")
    if precision == "fp32":
        return ModelStates(4, 4, 0, OPTIMIZERS[optimizer])
    return ModelStates(2, 2, 4, OPTIMIZERS[optimizer])


def activation_bytes(layers: int, hidden: int, seq_len: int, micro_batch: int) -> int:
    """The estimate above: 34·s·b·h bytes per layer, for all layers."""
    return 34 * seq_len * micro_batch * hidden * layers


def per_device_model_states(params: float, states: ModelStates, strategy: str, devices: int) -> float:
    """Bytes of model states on each of `devices` devices under a data-parallel `strategy`."""
    sharded = SHARDED[strategy]
    return sum(params * b / (devices if name in sharded else 1) for name, b in states.parts().items())


def devices_to_fit(params: float, states: ModelStates, device_bytes: float, activations: float = 0) -> int:
    """The fewest devices that hold the model when its states and its activations both split evenly
    across them, as tensor and pipeline parallelism split layers: ceil(total / device)."""
    return math.ceil((params * states.total + activations) / device_bytes)
