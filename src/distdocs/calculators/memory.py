"""How much memory training a model needs, and what sharding or splitting does to it.

Model states per parameter, in bytes (the accounting of the ZeRO paper, Rajbhandari et al. 2020), in
the precision layouts that real jobs run (Adam: m and v, or SGD: momentum, always in fp32), each named
after what it holds:

| layout | weights | gradients | fp32 gradients | master weights | Adam | total |
|---|---|---|---|---|---|---|
| `fp32` | 4 | 4 | - | - | 8 | 16 |
| `autocast` | 4 | 4 | - | - | 8 | 16 |
| `bf16-master` | 2 | 2 | - | 4 | 8 | 16 |
| `bf16-fp32-grads` | 2 | - | 4 | 4 | 8 | 18 |
| `bf16-master-fp32-grads` | 2 | 2 | 4 | 4 | 8 | 20 |

- `autocast` is what `torch.autocast` does, and what this site's examples do: fp32 weights and
  gradients, bf16 (or fp16) compute on 16-bit copies made on the fly. FSDP2 with
  `MixedPrecisionPolicy(param_dtype=torch.bfloat16)` keeps the same between steps: fp32 sharded
  parameters (`FSDPParam.orig_dtype`) and fp32 sharded gradients (the reduce-scatter's output is cast
  back to `orig_dtype`, `torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`). Its model
  states are fp32's; it saves activation memory and time.
- `bf16-master`: 16-bit weights and gradients and an fp32 master copy of the weights that the
  optimizer updates, 2 + 2 + 4 + 8. This is the ZeRO paper's count (its 16Ψ), an idealised one: the
  frameworks keep their gradients in fp32 too.
- `bf16-fp32-grads`: bf16 weights whose gradients accumulate straight into an fp32 buffer, with an
  fp32 master copy: 18 bytes, what Megatron-LM's distributed optimizer documents for bf16 (its fp16
  layout keeps fp16 gradients beside the fp32 ones: 20).
- `bf16-master-fp32-grads`: 16-bit weights and gradients, an fp32 buffer in which the gradients
  accumulate, and the master copy: 20 bytes, the Ultra-Scale Playbook's figure, and what DeepSpeed's
  ZeRO estimators count.

The ZeRO stages shard the states in this order: stage 1 the optimizer's (Adam's state and the master
weights), stage 2 the gradients too, 16-bit and fp32, stage 3 (and FSDP) the weights too. Under
stage 1 the fp32 gradient buffer stays whole, as DeepSpeed's `BF16_Optimizer` and Megatron-LM's
distributed optimizer keep it. The totals of the layouts agree, but what each
stage leaves whole, and so the per-device figures of ZeRO-1 and ZeRO-2, does not.

Activations are counted tensor by tensor, for the GPT layer of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", section 4.1, Table 2): layer norm, attention
that keeps its s x s scores, dropout, a 4h MLP. With 16-bit activations and 1-byte dropout masks a
layer keeps s·b·h·(34 + 5·a·s/h) bytes for sequence length s, micro-batch b, hidden size h and a
heads, in three settings of recomputation (`RECOMPUTE`):

- `none`: everything, the formula above;
- `selective`: the core attention (Q·Kᵀ, softmax, its dropout, times V) is recomputed in backward:
  34·s·b·h, the a·s²·b terms gone. FlashAttention keeps no s x s scores either, so this is also what a
  layer with fused attention keeps;
- `full`: each layer keeps only its input, 2·s·b·h, and runs its forward again in backward.

Tensor parallelism over t divides the terms inside the sharded matmuls by t; sequence parallelism
divides the rest too. The paper leaves out the layer norms' statistics (a mean and a 1/std per token);
`layer_activation_terms` counts them when given their size, and then it matches what PyTorch keeps
byte for byte (examples/recomputation/step01_three_settings.py). Real frameworks keep more or less
depending on fused kernels and buffers.

Splitting the layers divides the two kinds of memory differently. Tensor parallelism over t devices
divides the model states by t, and the activations inside its split matmuls; sequence parallelism
divides the rest of the activations too (`activation_split`). Pipeline
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
    "bf16-fp32-grads": (2, 0, 4, 4),
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


RECOMPUTE = ("none", "selective", "full")
# What one transformer layer keeps for backward (Korthikanti et al. 2022, section 4.1), as
# (name, unit, count, kind, split by tensor parallelism, recomputed by selective recomputation).
# unit: "sbh" (a value per token and hidden unit) or "as2b" (per head and pair of tokens); kind:
# "value" costs an activation's bytes, "mask" a dropout mask's. Terms not split by tensor parallelism
# are the inputs of layer norms, of the column-parallel matmuls and the dropouts outside them: sequence
# parallelism splits those.
LAYER_TERMS = (
    ("layer norm inputs", "sbh", 2, "value", False, False),
    ("QKV matmul input", "sbh", 1, "value", False, False),
    ("Q, K and V", "sbh", 3, "value", True, False),
    ("softmax output", "as2b", 1, "value", True, True),
    ("softmax dropout mask", "as2b", 1, "mask", True, True),
    ("softmax dropout output", "as2b", 1, "value", True, True),
    ("projection input", "sbh", 1, "value", True, False),
    ("attention dropout mask", "sbh", 1, "mask", False, False),
    ("MLP input", "sbh", 1, "value", False, False),
    ("GeLU input", "sbh", 4, "value", True, False),
    ("second MLP matmul input", "sbh", 4, "value", True, False),
    ("MLP dropout mask", "sbh", 1, "mask", False, False),
)


def layer_activation_terms(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    recompute: str = "none",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    value_bytes: int = 2,
    mask_bytes: int = 1,
    stats_bytes: int = 0,
) -> dict[str, float]:
    """Bytes one transformer layer keeps for backward, by tensor, per device (see the module's
    docstring). The defaults are the paper's: 16-bit activations, 1-byte masks (CUDA's fused dropout),
    no layer-norm statistics. On a CPU, dropout keeps its mask in the activations' dtype and layer
    norm its statistics too: mask_bytes = stats_bytes = value_bytes."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, not {recompute!r}")
    sbh, t = seq_len * micro_batch * hidden, tensor_parallel
    rest = t if sequence_parallel else 1  # what divides the terms that tensor parallelism leaves whole
    if recompute == "full":
        return {"layer input": value_bytes * sbh / rest}
    units = {"sbh": sbh, "as2b": heads * seq_len * seq_len * micro_batch}
    size = {"value": value_bytes, "mask": mask_bytes}
    terms = {
        name: count * units[unit] * size[kind] / (t if split else rest)
        for name, unit, count, kind, split, core in LAYER_TERMS
        if not (core and recompute == "selective")
    }
    if stats_bytes:
        terms["layer norm statistics"] = 4 * seq_len * micro_batch * stats_bytes / rest  # 2 norms x (mean, 1/std)
    return terms


def activation_split(
    layers: int, hidden: int, seq_len: int, micro_batch: int, recompute: str = "selective", heads: int = 0
) -> tuple[float, float]:
    """All layers' activations on one device, as (the bytes that tensor parallelism divides, the bytes it
    leaves whole): the layer norms' inputs, the matmuls' inputs before they are split and the dropouts
    outside them, 10·s·b·h of the 34 a layer keeps. Sequence parallelism divides the second part too."""
    split_terms = {name for name, *_, split, _core in LAYER_TERMS if split}
    terms = layer_activation_terms(seq_len, micro_batch, hidden, heads, recompute)
    split = sum(b for name, b in terms.items() if name in split_terms)
    return split * layers, (sum(terms.values()) - split) * layers


def activation_bytes(
    layers: int, hidden: int, seq_len: int, micro_batch: int, recompute: str = "selective", heads: int = 0
) -> int:
    """All layers' activations, by the paper's formula: 34·s·b·h bytes a layer with selective
    recomputation (or fused attention), s·b·h·(34 + 5·a·s/h) with none (it needs `heads`), 2·s·b·h
    with full."""
    if recompute == "none" and heads < 1:
        raise ValueError("recompute 'none' needs heads: the attention scores it keeps grow with them")
    terms = layer_activation_terms(seq_len, micro_batch, hidden, heads, recompute)
    return round(sum(terms.values())) * layers


def per_device_model_states(params: float, states: ModelStates, strategy: str, devices: int) -> float:
    """Bytes of model states on each of `devices` devices under a data-parallel `strategy`."""
    sharded = SHARDED[strategy]
    return sum(params * b / (devices if name in sharded else 1) for name, b in states.parts().items())


def tensor_pipeline_split(
    params: float,
    states: ModelStates,
    device_bytes: float,
    activations: float = 0,
    max_tensor_parallel: int = 8,
    whole: float = 0,
    sequence_parallel: bool = True,
) -> tuple[int, int] | None:
    """The fewest devices t x p that hold the model under t-way tensor and p-way pipeline parallelism,
    as (t, p): each device keeps states / (t p) and, on the first stage, the activations that tensor
    parallelism divides over t, plus those it leaves `whole` (divided over t too with sequence
    parallelism). t runs over powers of two up to `max_tensor_parallel`: at most the GPUs of one NVLink
    domain, since tensor parallelism needs its links (8 on an HGX node; a GB200 NVL72 rack's domain
    holds 72); of equal totals the smaller t wins. None if even the largest t leaves no room."""
    best = None
    t = 1
    while t <= max_tensor_parallel:
        room = device_bytes - activations / t - whole / (t if sequence_parallel else 1)
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
    activations: tuple[float, float] = (0, 0),
    activation_note: str = "",
    cluster: int = 0,
) -> str:
    """The memory report that `distdocs memory` prints; `activations` as `activation_split` gives them."""
    states = bytes_per_parameter(precision, optimizer)
    device = device_gib * GIB
    gib = lambda b: f"{b / GIB:9.1f} GiB"  # noqa: E731
    fits = lambda b: "fits" if b <= device else "does not fit"  # noqa: E731
    split_acts, whole_acts = activations
    activations = split_acts + whole_acts
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
    split = tensor_pipeline_split(params, states, device, split_acts, whole=whole_acts)
    if split is None:
        lines.append("tensor x pipeline parallel: the activations alone overflow a device even split 8 ways")
    else:
        t, p = split
        how = ", with sequence parallelism (TP divides activations, PP does not)" if activations else ""
        fewest = f"at least {t * p} devices of {device_gib:g} GiB, TP {t} x PP {p}"
        lines.append(f"tensor x pipeline parallel{how}: {fewest}")
        plain = tensor_pipeline_split(params, states, device, split_acts, whole=whole_acts, sequence_parallel=False)
        if whole_acts and plain != split:
            lines.append(
                "  without it (the norms' and dropouts' activations stay whole): "
                + (f"TP {plain[0]} x PP {plain[1]}" if plain else "the activations overflow a device")
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
