"""Argument handling for the `distdocs` command and its benchmarks: the parsers of sizes, counts, rates
and lists, the flags of each calculator, and the one error they raise. Bad input becomes one line on
stderr and exit code 2 (`UsageError`, which `distdocs.cli` prints). Nothing here imports torch, so
that `distdocs --help` and the calculators answer at once."""

from __future__ import annotations

import argparse
import math
import re

SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


class UsageError(ValueError):
    """Bad command-line input: `distdocs` prints it as one line and exits with code 2."""


def require(ok: bool, message: str) -> None:
    """Raise a UsageError with `message` unless `ok`."""
    if not ok:
        raise UsageError(message)


def parse_size(text: str) -> int:
    """'256K', '4M', '1G' (binary: K = 1024) or plain bytes, to a byte count that is a multiple of 4."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = SUFFIXES.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in SUFFIXES else t
    ok = number.isdigit() and int(number) * scale >= 4 and int(number) * scale % 4 == 0
    require(ok, f"bad size {text!r}: use bytes (a multiple of 4) or 256K, 4M, 1G (binary units)")
    return int(number) * scale


def parse_rate(text: str) -> float:
    """'100mbit' -> 1e8: a link's rate in tc's spelling (a number, then kbit, mbit or gbit; decimal
    units), in bits per second. The benchmarks' --link flags, the lab's links and the explorer read
    rates with it."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", text)
    require(m is not None, f"rate {text!r}: expected a number and kbit, mbit or gbit, as in 100mbit or 1gbit")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def parse_list(text: str, kind: type, what: str, minimum: float = 1) -> list:
    """'1,2,4' to [1, 2, 4], each of type `kind` and at least `minimum`; else a UsageError."""
    try:
        values = [kind(v) for v in text.split(",")]
    except ValueError:
        values = []
    require(
        bool(values) and all(v >= minimum for v in values),
        f"{what} must be a comma-separated list of numbers of at least {minimum}, not {text!r}",
    )
    return values


def parse_count(text: str) -> float:
    """'70B', '7e9', '125M' to a number."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:].upper(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text)
    except ValueError:
        value = -1.0
    if not value > 0 or math.isinf(value):
        raise UsageError(f"bad count {text!r}: use a positive number such as 70B, 125M or 7e9")
    return value * scale


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """`distdocs doctor`'s flags."""
    parser.add_argument("--nproc-per-node", type=int, default=2, help="the processes you will launch here (default: 2)")
    parser.add_argument("--port", type=int, default=29500, help="the port a launch will use (default: 29500)")
    parser.add_argument("--json", action="store_true", help="print the report and the traps as JSON")


def add_memory_arguments(parser: argparse.ArgumentParser) -> None:
    """`distdocs memory`'s flags."""
    parser.add_argument("--params", required=True, help="parameter count: 70B, 125M, 7e9")
    parser.add_argument(
        "--precision",
        default="bf16-master",
        help="the precision layout: fp32, autocast, bf16-master (default), bf16-fp32-grads or bf16-master-fp32-grads",
    )
    parser.add_argument("--layouts", action="store_true", help="model states per device for every layout and strategy")
    parser.add_argument("--optimizer", default="adam", help="adam (default) or sgd (with momentum)")
    parser.add_argument("--devices", type=int, default=8, help="data-parallel devices (default: 8)")
    parser.add_argument("--cluster", type=int, help="devices in the whole job: lay them out as TP x PP x DP")
    parser.add_argument("--device-gib", type=float, default=80, help="memory per device in GiB (default: 80)")
    for flag, text in [
        ("--layers", "transformer layers"),
        ("--hidden", "hidden size"),
        ("--seq-len", "sequence length"),
        ("--micro-batch", "sequences per device"),
    ]:
        parser.add_argument(flag, type=int, help=f"{text}, for the activation estimate")
    parser.add_argument(
        "--recompute",
        default="selective",
        help="activation recomputation: none (needs --heads), selective (default; the core attention, "
        "or fused attention) or full",
    )
    parser.add_argument(
        "--heads", type=int, default=0, help="attention heads, for the activations without recomputation"
    )


def add_mfu_arguments(parser: argparse.ArgumentParser) -> None:
    """`distdocs mfu`'s flags."""
    parser.add_argument("--params", help="parameter count (8.03B, 7e9); or count them from the layout below")
    for flag, text in [
        ("--layers", "transformer layers"),
        ("--hidden", "hidden size (heads x head size)"),
        ("--seq-len", "sequence length in tokens"),
    ]:
        parser.add_argument(flag, type=int, required=True, help=text)
    for flag, text in [
        ("--heads", "attention heads"),
        ("--kv-heads", "key and value heads (grouped-query attention)"),
        ("--ffn", "feed-forward (SwiGLU) hidden size"),
        ("--vocab", "vocabulary size"),
    ]:
        parser.add_argument(flag, type=int, help=f"{text}: with the three others, count the parameters")
    parser.add_argument("--without-embedding", action="store_true", help="leave the embedding table out of N")
    parser.add_argument("--tokens-per-s", type=float, required=True, help="training tokens per second, per device")
    parser.add_argument("--peak-tflops", type=float, required=True, help="the device's peak, in the matmuls' precision")


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    """`distdocs sim`'s flags; `sim_inputs` reads them."""
    parser.add_argument("--params", help="parameters whose gradients sync: 8.4M, 1.3B")
    parser.add_argument("--compute-per-sample", type=float, metavar="MS", help="forward + backward per sample, ms")
    parser.add_argument("--micro-batch", type=int, help="samples per rank per micro-batch")
    parser.add_argument("--accumulation", type=int, default=1, help="micro-batches per optimizer step (default: 1)")
    parser.add_argument("--gradient-dtype", default="fp32", help="fp32 (default) or bf16")
    parser.add_argument(
        "--bucket-mb", type=float, help="DDP's bucket_cap_mb (default: DDP's, 25, after a first bucket of 1 MiB)"
    )
    parser.add_argument("--no-overlap", action="store_true", help="sync after the backward pass, not during it")
    parser.add_argument("--algorithm", default="ring", help="ring (default), tree or naive")
    parser.add_argument("--world-sizes", default="1,2,4,8", help="comma-separated (default: 1,2,4,8)")
    parser.add_argument("--network", default="pcie4", help="a preset: pcie4 (default), nvlink4, ib-400g, eth-100g")
    parser.add_argument("--bandwidth", type=float, metavar="GB/S", help="link bandwidth, instead of a preset")
    parser.add_argument("--latency", type=float, metavar="US", help="per-message latency in µs, with --bandwidth")
    parser.add_argument("--fit", metavar="JSON", help="α and β fitted to a saved `distdocs bench allreduce` run")
    parser.add_argument("--fit-impl", default="gloo", help="which implementation's timings to fit (default: gloo)")
    parser.add_argument("--fit-world-size", type=int, help="fit the timings of this world size only")
    parser.add_argument("--measured", metavar="JSON", help="calibrate on a saved `distdocs bench scaling` run instead")
    parser.add_argument("--model", help="with --measured: which of its models, compute-bound or sync-bound")
    parser.add_argument("--json", action="store_true", help="print the workload, network and steps as JSON")
    parser.add_argument("--plot", metavar="SVG", help="also draw speedup against ranks into this SVG file")


def sim_inputs(args: argparse.Namespace):
    """The workload and network that `distdocs sim` flags describe, and a note on where they came from."""
    from distdocs.calculators import costmodel, fits

    if args.measured:
        require(args.model is not None, "--measured needs --model: compute-bound or sync-bound")
        work, network = fits.load_scaling(args.measured, args.model, args.accumulation)
        return work, network, f"# calibrated on {args.measured}: compute per sample at 1 rank, sync at 2 ranks"
    require(
        None not in (args.params, args.compute_per_sample, args.micro_batch),
        "give --params, --compute-per-sample and --micro-batch, or --measured with --model",
    )
    for flag in ("compute_per_sample", "micro_batch", "bucket_mb"):
        value = getattr(args, flag)
        require(
            value is None or (value > 0 and math.isfinite(value)),
            f"--{flag.replace('_', '-')} must be positive, not {value}",
        )
    note = ""
    if args.fit:
        fit = fits.load_fit(args.fit, args.fit_impl, args.fit_world_size)
        network = fit.network
        note = f"# fit: {fit.points} timings, relative RMS error {fit.relative_rms:.0%}"
    elif args.bandwidth is not None or args.latency is not None:
        require(args.bandwidth is not None and args.latency is not None, "give --bandwidth and --latency together")
        network = costmodel.Network.from_bandwidth(args.bandwidth, args.latency, "given")
    else:
        require(args.network in costmodel.PRESETS, f"--network must be one of {', '.join(costmodel.PRESETS)}")
        network = costmodel.PRESETS[args.network]
    work = costmodel.Workload(
        params=parse_count(args.params),
        compute_per_sample=args.compute_per_sample / 1e3,
        micro_batch=args.micro_batch,
        accumulation=args.accumulation,
        gradient_dtype=args.gradient_dtype,
        overlap=not args.no_overlap,
        # DDP keeps its first bucket at 1 MiB only while bucket_cap_mb is left at its default
        **(
            {}
            if args.bucket_mb is None
            else {"bucket_bytes": args.bucket_mb * 2**20, "first_bucket_bytes": args.bucket_mb * 2**20}
        ),
    )
    return work, network, note
