"""How much memory training a model needs, and what sharding or splitting does to it.

Model states per parameter, in bytes (the accounting of the ZeRO paper, Rajbhandari et al. 2020), in
the four precision layouts that real jobs run (Adam: m and v, or SGD: momentum, always in fp32):

| layout | weights | gradients | fp32 gradients | master weights | Adam | total |
|---|---|---|---|---|---|---|
| `fp32` | 4 | 4 | - | - | 8 | 16 |
| `autocast` | 4 | 4 | - | - | 8 | 16 |
| `bf16-master` | 2 | 2 | - | 4 | 8 | 16 |
| `bf16-master-fp32-grads` | 2 | 2 | 4 | 4 | 8 | 20 |

- `autocast` is what `torch.autocast` does, and what this site's examples do: fp32 weights and
  gradients, bf16 (or fp16) compute on 16-bit copies made on the fly. FSDP2 with
  `MixedPrecisionPolicy(param_dtype=torch.bfloat16)` keeps the same between steps: fp32 sharded
  parameters (`FSDPParam.orig_dtype`) and fp32 sharded gradients (the reduce-scatter's output is cast
  back to `orig_dtype`, `torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`). Its model
  states are fp32's; it saves activation memory and time.
- `bf16-master` is the layout of Megatron-LM and DeepSpeed: bf16 weights and gradients, and an fp32
  master copy of the weights that the optimizer updates.
- `bf16-master-fp32-grads` adds an fp32 buffer in which the gradients accumulate: 20 bytes a
  parameter, the Ultra-Scale Playbook's figure, and what DeepSpeed's ZeRO estimators count.

The ZeRO stages shard the states in this order: stage 1 the optimizer's (Adam's state and the master
weights), stage 2 the gradients too, 16-bit and fp32, stage 3 (and FSDP) the weights too. Under
stage 1 the fp32 gradient buffer stays whole, as DeepSpeed's `BF16_Optimizer` and Megatron-LM's
distributed optimizer keep it. The totals of the layouts agree, but what each
stage leaves whole, and so the per-device figures of ZeRO-1 and ZeRO-2, does not.

Activations are an estimate, for a transformer with 16-bit activations and FlashAttention-style
attention (no s x s score matrix kept): about 34·s·b·h bytes per layer for sequence length s,
micro-batch b and hidden size h (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", without the 5·a·s/h attention term). Real frameworks keep more or less
depending on recomputation, fused kernels and buffers.

Splitting the layers divides the two kinds of memory differently. Tensor parallelism over t devices
(with sequence parallelism) divides both the model states and the activations by t. Pipeline
parallelism over p stages divides the model states by p but not the activations of the first stage:
under 1F1B it keeps p micro-batches in flight, each with the activations of its L/p layers, which is
L layers' worth, as many as without a pipeline (Korthikanti et al. 2022, section 4.2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1 << 30
OPTIMIZERS = {"adam": 8, "sgd": 4}  # fp32 optimizer-state bytes per parameter
# Bytes per parameter of the weights, 16-bit or fp32 gradients, and master weights, per layout.
LAYOUTS = {
    "fp32": (4, 4, 0, 0),
    "autocast": (4, 4, 0, 0),
    "bf16-master": (2, 2, 0, 4),
    "bf16-master-fp32-grads": (2, 2, 4, 4),
}
PRECISIONS = tuple(LAYOUTS)
# What each data-parallel strategy divides by the number of devices n (ZeRO stages; FSDP = stage 3).
# The ZeRO paper counts fp32 master weights as optimizer state, so stage 1 shards them too.
SHARDED = {
    "DDP": (),
    "ZeRO-1": ("master weights", "optimizer"),
    "ZeRO-2": ("master weights", "optimizer", "fp32 gradients", "gradients"),
    "ZeRO-3/FSDP": ("master weights", "optimizer", "fp32 gradients", "gradients", "weights"),
}


@dataclass(frozen=True)
class ModelStates:
    """Bytes per parameter of each kind of model state."""

    weights: int
    gradients: int
    master_weights: int
    optimizer: int
    fp32_gradients: int = 0  # an fp32 accumulation buffer beside 16-bit gradients

    def parts(self) -> dict[str, int]:
        """The parts by name, in the order the reports print them."""
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "fp32 gradients": self.fp32_gradients,
            "master weights": self.master_weights,
            "optimizer": self.optimizer,
        }

    @property
    def total(self) -> int:
        return sum(self.parts().values())


def bytes_per_parameter(precision: str = "bf16-master", optimizer: str = "adam") -> ModelStates:
    """Bytes that one parameter costs in training, split into its parts, for a precision layout in
    `LAYOUTS` (see the module's docstring) and an optimizer in `OPTIMIZERS`; a ValueError names the
    choices otherwise."""
    if precision not in LAYOUTS:
        raise ValueError(f"precision must be one of {', '.join(LAYOUTS)}, not {precision!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, not {optimizer!r}")
    weights, gradients, fp32_gradients, master = LAYOUTS[precision]
    return ModelStates(weights, gradients, master, OPTIMIZERS[optimizer], fp32_gradients)


def activation_bytes(layers: int, hidden: int, seq_len: int, micro_batch: int) -> int:
    """The estimate above: 34·s·b·h bytes per layer, for all layers."""
    return 34 * seq_len * micro_batch * hidden * layers


def per_device_model_states(params: float, states: ModelStates, strategy: str, devices: int) -> float:
    """Bytes of model states on each of `devices` devices under a data-parallel `strategy`."""
    sharded = SHARDED[strategy]
    return sum(params * b / (devices if name in sharded else 1) for name, b in states.parts().items())


def tensor_pipeline_split(
    params: float, states: ModelStates, device_bytes: float, activations: float = 0, max_tensor_parallel: int = 8
) -> tuple[int, int] | None:
    """The fewest devices t x p that hold the model under t-way tensor and p-way pipeline parallelism,
    as (t, p): each device keeps states / (t p) and, on the first stage, activations / t. t runs over
    powers of two up to `max_tensor_parallel`: at most the GPUs of one NVLink domain, since tensor
    parallelism needs its links (8 on an HGX node; a GB200 NVL72 rack's domain holds 72); of equal
    totals the smaller t wins.
    None if even the largest t leaves no room."""
    best = None
    t = 1
    while t <= max_tensor_parallel:
        room = device_bytes - activations / t
        if room > 0:
            p = max(1, math.ceil(params * states.total / t / room))
            if best is None or t * p < best[0] * best[1]:
                best = (t, p)
        t *= 2
    return best


def layouts_report(params: float, optimizer: str = "adam", devices: int = 8) -> str:
    """Model states per device for every precision layout under every data-parallel strategy: the
    table that `distdocs memory --layouts` prints."""
    head = f"{'layout':<24} {'B/param':>7} " + " ".join(f"{s:>11}" for s in SHARDED)
    lines = [f"{params / 1e9:.1f} B parameters, {optimizer}, {devices} devices: model states per device, GiB", head]
    for layout in LAYOUTS:
        states = bytes_per_parameter(layout, optimizer)
        cells = " ".join(f"{per_device_model_states(params, states, s, devices) / GIB:>11.1f}" for s in SHARDED)
        lines.append(f"{layout:<24} {states.total:>7} {cells}")
    return "\n".join(lines)


def report(
    params: float,
    precision: str = "bf16-master",
    optimizer: str = "adam",
    devices: int = 8,
    device_gib: float = 80,
    activations: float = 0,
    activation_note: str = "",
    cluster: int = 0,
) -> str:
    """The memory report that `distdocs memory` prints."""
    states = bytes_per_parameter(precision, optimizer)
    device = device_gib * GIB
    gib = lambda b: f"{b / GIB:9.1f} GiB"  # noqa: E731
    fits = lambda b: "fits" if b <= device else "does not fit"  # noqa: E731
    lines = [
        f"{params / 1e9:.1f} B parameters, {precision}, {optimizer}: {states.total} bytes per parameter of model states"
    ]
    lines += [f"  {name:<16} {per:>3} B/param {gib(params * per)}" for name, per in states.parts().items() if per]
    total = params * states.total
    lines.append(f"  {'model states':<16} {states.total:>3} B/param {gib(total)}")
    if activations:
        lines.append(f"  {'activations':<16} {'':>9} {gib(activations)}  ({activation_note})")
    lines.append(
        f"one {device_gib:g} GiB device: {fits(total + activations)} (needs {gib(total + activations).strip()})"
    )
    lines.append(f"per device, data parallel over {devices} devices (model states + activations):")
    for strategy in SHARDED:
        each = per_device_model_states(params, states, strategy, devices) + activations
        lines.append(f"  {strategy:<12} {gib(each)}  {fits(each)}")
    split = tensor_pipeline_split(params, states, device, activations)
    if split is None:
        lines.append("tensor x pipeline parallel: the activations alone overflow a device even split 8 ways")
    else:
        t, p = split
        lines.append(
            f"tensor x pipeline parallel (TP divides activations, PP does not): at least {t * p} "
            f"devices of {device_gib:g} GiB, TP {t} x PP {p}"
        )
        if cluster:
            replicas, spare = divmod(cluster, t * p)
            if not replicas:
                lines.append(f"on {cluster} devices: too few for one replica, which needs {t * p}")
            else:
                lines.append(
                    f"on {cluster} devices: TP {t} x PP {p} x DP {replicas} (data-parallel replicas of {t * p} devices)"
                    + (f", {spare} devices left over" if spare else "")
                )
    return "\n".join(lines)
