"""The `distdocs` command line: argparse and dispatch. The work lives in the modules it calls."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from distdocs import __version__, arguments
from distdocs.arguments import UsageError, parse_count, parse_list, require, sim_inputs

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
    "bubble": "the pipeline bubble on emulated accelerators: GPipe and 1F1B at 2 and 4 stages, against (p-1)/(m+p-1)",
    "emulated": "the scale model: 1-16 emulated accelerators in DDP over dialled links, against the cost model",
}


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
    from distdocs.calculators import memory

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
    from distdocs.calculators import mfu

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


def cmd_sim(args: argparse.Namespace) -> int:
    from distdocs.calculators import costmodel

    require(args.accumulation >= 1, f"--accumulation must be at least 1, not {args.accumulation}")
    try:
        work, network, note = sim_inputs(args)
        steps = costmodel.predict_steps(
            work, parse_list(args.world_sizes, int, "--world-sizes"), network, args.algorithm
        )
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
    if folder := os.environ.get("DISTDOCS_RECORDS"):  # the doc tests: the run a page shows, as data too
        with open(os.path.join(folder, f"{args.benchmark}-{os.getpid()}.json"), "w") as f:
            json.dump({"benchmark": args.benchmark, "machine": machine, "records": records}, f)
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
    commands = [
        ("doctor", "report what this machine offers for distributed training, and the traps it sets", cmd_doctor),
        ("memory", "memory needed to train a model, and what sharding does to it", cmd_memory),
        ("mfu", "FLOPs per token of a dense transformer, and the MFU a throughput reaches", cmd_mfu),
        ("sim", "predict data-parallel step time and speedup with the cost model", cmd_sim),
    ]
    for name, help_text, func in commands:
        command = sub.add_parser(name, help=help_text)
        getattr(arguments, f"add_{name}_arguments")(command)
        command.set_defaults(func=func)

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
    raise SystemExit(main())
