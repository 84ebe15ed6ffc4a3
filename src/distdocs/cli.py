"""The `distdocs` command line: argparse and dispatch. The work lives in the modules it calls."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys

from distdocs import __version__

# Argument handling, shared with the benchmarks' own flags (distdocs.bench.*.add_arguments and main):
# bad input becomes one line on stderr and exit code 2. Nothing here imports torch, so that `distdocs
# --help` and the calculators answer at once.
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


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


# `distdocs bench NAME` runs distdocs.bench.NAME; a new benchmark is a module plus a line here.
BENCHMARKS = {
    "allreduce": "gloo's all_reduce against distdocs' ring, tree and naive: time, algbw, busbw",
    "pipeline": "idle time of each stage of a 2-stage GPipe pipeline against (p-1)/(m+p-1)",
    "ddp": "samples/s of torch's DDP and distdocs' BucketedDDP, 2 ranks",
    "buckets": "torch DDP's bucket_cap_mb and gradient_as_bucket_view: step time and memory, 2 ranks",
    "precision": "float32 against bfloat16 autocast in DDP: step time and what a forward keeps, 2 ranks",
    "scaling": "samples/s at 1, 2 and 4 ranks, compute- and sync-bound, with and without accumulation",
    "prediction": "the cost model's DDP step time against the measured one, at 1 and 2 ranks",
    "compression": "torch's DDP compression hooks over dialled links: bytes, step time, loss, prediction",
    "hierarchy": "2 nodes x 2 ranks over a dialled link: flat ring, two-level allreduce, gloo; DDP, FSDP, HSDP bytes",
    "recovery": "from a rank killed under torchrun back to training: each phase timed, 2 ranks",
    "torchft": "torchft's replica groups beside torchrun's restart-everything: one rank of 2 killed, both timed",
    "checkpointing": "DCP's save against async_save while training: the stall, the time to durable, 2 ranks",
    "slurm": "SLURM requeues a job after a lost node or a preemption signal: each phase timed (root)",
    "exits": "examples launched again and again under torchrun: how many ranks abort at exit",
    "emulated": "the scale model: 1-8 emulated accelerators in DDP over dialled links, against the cost model (root)",
}


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


def cmd_doctor(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from distdocs.doctor import environment_report, find_traps, format_report, format_traps

    if args.nproc_per_node < 1 or not 0 < args.port < 65536:
        raise UsageError("--nproc-per-node must be positive and --port in 1..65535")
    report = environment_report()
    traps = find_traps(args.nproc_per_node, args.port, report)
    if args.json:
        print(json.dumps({**report, "traps": [asdict(t) for t in traps]}, indent=2))
    else:
        print(format_report(report))
        print(f"\nfor {args.nproc_per_node} processes on this machine:")
        print(format_traps(traps))
    return 1 if any(t.level == "error" for t in traps) else 0


def cmd_memory(args: argparse.Namespace) -> int:
    from distdocs import memory

    params = parse_count(args.params)
    act_args = (args.layers, args.hidden, args.seq_len, args.micro_batch)
    if any(a is not None for a in act_args) and not all(a and a > 0 for a in act_args):
        raise UsageError("the activation estimate needs --layers, --hidden, --seq-len and --micro-batch, all positive")
    if args.devices < 1 or args.device_gib <= 0:
        raise UsageError("--devices and --device-gib must be positive")
    require(
        args.recompute in memory.RECOMPUTE,
        f"--recompute must be one of {', '.join(memory.RECOMPUTE)}, not {args.recompute!r}",
    )
    require(args.heads >= 0, f"--heads must be a positive number of heads, not {args.heads}")
    require(
        all(act_args) or (args.recompute == "selective" and not args.heads),
        "--recompute and --heads set the activation estimate: give --layers, --hidden, --seq-len and --micro-batch too",
    )
    try:
        memory.bytes_per_parameter(args.precision, args.optimizer)
    except ValueError as e:
        raise UsageError(str(e)) from None
    activations, note = (0, 0), ""
    if all(act_args):
        require(
            args.recompute != "none" or args.heads > 0,
            "--recompute none needs --heads: the attention scores it keeps grow with the number of heads",
        )
        activations = memory.activation_split(*act_args, recompute=args.recompute, heads=args.heads)
        formula = {"none": "s*b*h*(34+5*a*s/h)", "selective": "34*s*b*h", "full": "2*s*b*h"}[args.recompute]
        note = (
            f"recompute {args.recompute}: {formula} bytes x {args.layers} layers, "
            f"s={args.seq_len}, b={args.micro_batch}, h={args.hidden}" + (f", a={args.heads}" if args.heads else "")
        )
    if args.cluster is not None and args.cluster < 1:
        raise UsageError(f"--cluster must be a positive number of devices, not {args.cluster}")
    if args.layouts:
        print(memory.layouts_report(params, args.optimizer, args.devices))
        return 0
    print(
        memory.report(
            params, args.precision, args.optimizer, args.devices, args.device_gib, activations, note, args.cluster or 0
        )
    )
    return 0


def cmd_mfu(args: argparse.Namespace) -> int:
    from distdocs import mfu

    shape = (args.layers, args.hidden, args.seq_len)
    require(all(v > 0 for v in shape), "--layers, --hidden and --seq-len must be positive")
    require(args.tokens_per_s > 0 and args.peak_tflops > 0, "--tokens-per-s and --peak-tflops must be positive")
    llama = (args.heads, args.kv_heads, args.ffn, args.vocab)
    if args.params is not None:
        require(all(v is None for v in llama), "give --params, or --heads, --kv-heads, --ffn and --vocab: not both")
        params = parse_count(args.params)
    else:
        require(
            all(v is not None and v > 0 for v in llama) and args.hidden % args.heads == 0,
            "give --params, or --heads, --kv-heads, --ffn and --vocab (positive; heads divide --hidden)",
        )
        counted = mfu.llama_params(args.layers, args.hidden, *llama)
        params = counted.without_embedding if args.without_embedding else counted.total
        what = "without the embedding table" if args.without_embedding else "the embedding table included"
        print(f"parameters (Llama layout, {what}): {params:,}")
    print(mfu.report(params, *shape, args.tokens_per_s, args.peak_tflops))
    return 0


def sim_inputs(args: argparse.Namespace):
    """The workload and network that `distdocs sim` flags describe, and a note on where they came from."""
    from distdocs import costmodel

    if args.measured:
        require(args.model is not None, "--measured needs --model: compute-bound or sync-bound")
        try:
            with open(args.measured) as f:
                records = json.load(f)["records"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UsageError(f"{args.measured}: not a saved scaling benchmark ({e})") from None
        work, network = costmodel.from_scaling(records, args.model, args.accumulation)
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
        fit = costmodel.load_fit(args.fit, args.fit_impl, args.fit_world_size)
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


def cmd_sim(args: argparse.Namespace) -> int:
    from distdocs import costmodel

    require(args.accumulation >= 1, f"--accumulation must be at least 1, not {args.accumulation}")
    try:
        work, network, note = sim_inputs(args)
        steps = costmodel.simulate(work, parse_list(args.world_sizes, int, "--world-sizes"), network, args.algorithm)
    except ValueError as e:
        raise UsageError(str(e)) from None
    table = costmodel.format_table(work, network, args.algorithm, steps)
    if args.plot:
        from distdocs.figures import speedup_curves

        with open(args.plot, "w") as f:
            f.write(speedup_curves({"model": steps}, table.splitlines()[1].lstrip("# ")))
    if args.json:
        rows = [{**vars(s), "step": s.step} for s in steps]
        out = {"workload": vars(work), "network": vars(network), "algorithm": args.algorithm, "steps": rows}
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(filter(None, [table, note])))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from distdocs.bench.harness import machine_info, save

    module = importlib.import_module(f"distdocs.bench.{args.benchmark}")
    # Progress for a person at a terminal; nothing when the output goes to a file or a pipe.
    progress = (lambda msg: print(msg, file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    records = module.main(args, progress)
    machine = machine_info()
    table = module.format_table(records, machine)
    if args.save:
        save(args.save, machine, records, table)
    if getattr(args, "figure", None):
        with open(args.figure, "w") as f:
            f.write(module.plot(records, machine))
    print(json.dumps({"machine": machine, "records": records}, indent=2) if args.json else table)
    return 0


def build_parser(benchmark: str | None = None) -> argparse.ArgumentParser:
    """The whole command line. Each benchmark's own flags come from its module, which imports torch;
    only `benchmark`'s module is imported (None: none), so that everything else answers at once."""
    parser = argparse.ArgumentParser(
        prog="distdocs", description="Tools behind the distdocs guide to distributed training."
    )
    parser.add_argument("--version", action="version", version=f"distdocs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser(
        "doctor", help="report what this machine offers for distributed training, and the traps it sets"
    )
    doctor.add_argument("--nproc-per-node", type=int, default=2, help="the processes you will launch here (default: 2)")
    doctor.add_argument("--port", type=int, default=29500, help="the port a launch will use (default: 29500)")
    doctor.add_argument("--json", action="store_true", help="print the report and the traps as JSON")
    doctor.set_defaults(func=cmd_doctor)

    mem = sub.add_parser("memory", help="memory needed to train a model, and what sharding does to it")
    mem.add_argument("--params", required=True, help="parameter count: 70B, 125M, 7e9")
    mem.add_argument(
        "--precision",
        default="bf16-master",
        help="the precision layout: fp32, autocast, bf16-master (default), bf16-fp32-grads or bf16-master-fp32-grads",
    )
    mem.add_argument("--layouts", action="store_true", help="model states per device for every layout and strategy")
    mem.add_argument("--optimizer", default="adam", help="adam (default) or sgd (with momentum)")
    mem.add_argument("--devices", type=int, default=8, help="data-parallel devices (default: 8)")
    mem.add_argument("--cluster", type=int, help="devices in the whole job: lay them out as TP x PP x DP")
    mem.add_argument("--device-gib", type=float, default=80, help="memory per device in GiB (default: 80)")
    for flag, text in [
        ("--layers", "transformer layers"),
        ("--hidden", "hidden size"),
        ("--seq-len", "sequence length"),
        ("--micro-batch", "sequences per device"),
    ]:
        mem.add_argument(flag, type=int, help=f"{text}, for the activation estimate")
    mem.add_argument(
        "--recompute",
        default="selective",
        help="activation recomputation: none (needs --heads), selective (default; the core attention, "
        "or fused attention) or full",
    )
    mem.add_argument("--heads", type=int, default=0, help="attention heads, for the activations without recomputation")
    mem.set_defaults(func=cmd_memory)

    m = sub.add_parser("mfu", help="FLOPs per token of a dense transformer, and the MFU a throughput reaches")
    m.add_argument("--params", help="parameter count (8.03B, 7e9); or count them from the layout below")
    for flag, text in [
        ("--layers", "transformer layers"),
        ("--hidden", "hidden size (heads x head size)"),
        ("--seq-len", "sequence length in tokens"),
    ]:
        m.add_argument(flag, type=int, required=True, help=text)
    for flag, text in [
        ("--heads", "attention heads"),
        ("--kv-heads", "key and value heads (grouped-query attention)"),
        ("--ffn", "feed-forward (SwiGLU) hidden size"),
        ("--vocab", "vocabulary size"),
    ]:
        m.add_argument(flag, type=int, help=f"{text}: with the three others, count the parameters")
    m.add_argument("--without-embedding", action="store_true", help="leave the embedding table out of N")
    m.add_argument("--tokens-per-s", type=float, required=True, help="training tokens per second, per device")
    m.add_argument("--peak-tflops", type=float, required=True, help="the device's peak, in the matmuls' precision")
    m.set_defaults(func=cmd_mfu)

    sim = sub.add_parser("sim", help="predict data-parallel step time and speedup with the cost model")
    sim.add_argument("--params", help="parameters whose gradients sync: 8.4M, 1.3B")
    sim.add_argument("--compute-per-sample", type=float, metavar="MS", help="forward + backward per sample, ms")
    sim.add_argument("--micro-batch", type=int, help="samples per rank per micro-batch")
    sim.add_argument("--accumulation", type=int, default=1, help="micro-batches per optimizer step (default: 1)")
    sim.add_argument("--gradient-dtype", default="fp32", help="fp32 (default) or bf16")
    sim.add_argument(
        "--bucket-mb", type=float, help="DDP's bucket_cap_mb (default: DDP's, 25, after a first bucket of 1 MiB)"
    )
    sim.add_argument("--no-overlap", action="store_true", help="sync after the backward pass, not during it")
    sim.add_argument("--algorithm", default="ring", help="ring (default), tree or naive")
    sim.add_argument("--world-sizes", default="1,2,4,8", help="comma-separated (default: 1,2,4,8)")
    sim.add_argument("--network", default="pcie4", help="a preset: pcie4 (default), nvlink4, ib-400g, eth-100g")
    sim.add_argument("--bandwidth", type=float, metavar="GB/S", help="link bandwidth, instead of a preset")
    sim.add_argument("--latency", type=float, metavar="US", help="per-message latency in µs, with --bandwidth")
    sim.add_argument("--fit", metavar="JSON", help="α and β fitted to a saved `distdocs bench allreduce` run")
    sim.add_argument("--fit-impl", default="gloo", help="which implementation's timings to fit (default: gloo)")
    sim.add_argument("--fit-world-size", type=int, help="fit the timings of this world size only")
    sim.add_argument("--measured", metavar="JSON", help="calibrate on a saved `distdocs bench scaling` run instead")
    sim.add_argument("--model", help="with --measured: which of its models, compute-bound or sync-bound")
    sim.add_argument("--json", action="store_true", help="print the workload, network and steps as JSON")
    sim.add_argument("--plot", metavar="SVG", help="also draw speedup against ranks into this SVG file")
    sim.set_defaults(func=cmd_sim)

    bench = sub.add_parser("bench", help="benchmarks, measured side by side in one run")
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, help_text in BENCHMARKS.items():
        one = bench_sub.add_parser(name, help=help_text)
        one.set_defaults(func=cmd_bench)
        if name != benchmark:
            continue
        module = importlib.import_module(f"distdocs.bench.{name}")
        module.add_arguments(one)
        if hasattr(module, "plot"):
            one.add_argument("--figure", metavar="SVG", help="also draw the results into this SVG file")
        one.add_argument("--json", action="store_true", help="print {machine, records} as JSON instead of the table")
        one.add_argument(
            "--save", metavar="PREFIX", help="also write PREFIX.json and PREFIX.txt (the data the pages quote)"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `distdocs bench NAME ...`: NAME's module adds its flags; any other command imports no benchmark.
    words = [a for a in argv if not a.startswith("-")]
    benchmark = words[1] if len(words) >= 2 and words[0] == "bench" and argv[0] == "bench" else None
    parser = build_parser(benchmark if benchmark in BENCHMARKS else None)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # `python -m distdocs.cli` runs this file as __main__; the benchmarks raise distdocs.cli's UsageError,
    # so run that module's main, not this copy's.
    from distdocs.cli import main as cli_main

    raise SystemExit(cli_main())
