"""The `distdocs` command line."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys

from distdocs import __version__


def environment_report() -> dict:
    """What this machine offers for distributed training: versions, devices and backends."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    return {
        "distdocs": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "cuda_available": cuda,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "distributed_available": dist.is_available(),
        "backends": {
            "gloo": dist.is_gloo_available(),
            "nccl": dist.is_nccl_available(),
            "mpi": dist.is_mpi_available(),
        },
        "examples_use": "nccl on cuda:LOCAL_RANK" if cuda else "gloo on the CPU",
    }


def cmd_doctor(args: argparse.Namespace) -> int:
    report = environment_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(len(k) for k in report)
        for key, value in report.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in value.items())
            print(f"{key:<{width}}  {value}")
    if not (report["distributed_available"] and report["backends"]["gloo"]):
        print("error: this torch build has no torch.distributed with gloo; the examples need it",
              file=sys.stderr)
        return 1
    return 0


def cmd_bench_allreduce(args: argparse.Namespace) -> int:
    from distdocs.bench import bench_allreduce, format_allreduce_table, parse_size

    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        world_sizes = [int(w) for w in args.world_sizes.split(",")]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if any(w < 1 for w in world_sizes) or args.iters < 1 or args.warmup < 0 or args.repeat < 1:
        print("error: world sizes, --iters and --repeat must be at least 1, --warmup at least 0",
              file=sys.stderr)
        return 2
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    records = bench_allreduce(world_sizes, sizes, args.iters, args.warmup, progress, args.repeat)
    return emit_results(args, records, format_allreduce_table)


def cmd_bench_pipeline(args: argparse.Namespace) -> int:
    from distdocs.bench import bench_pipeline, format_pipeline_table

    try:
        counts = [int(c) for c in args.microbatches.split(",")]
    except ValueError:
        counts = []
    if not counts or any(c < 1 or args.batch % c for c in counts) or min(args.width, args.steps) < 1:
        print("error: --microbatches must be positive integers that divide --batch; --width and "
              "--steps must be positive", file=sys.stderr)
        return 2
    records = bench_pipeline(counts, args.width, args.batch, args.steps)
    return emit_results(args, records, format_pipeline_table)


def cmd_bench_ddp(args: argparse.Namespace) -> int:
    from distdocs.bench_ddp import bench_ddp, format_ddp_table

    if min(args.batch, args.width) < 1 or args.steps < 3:
        print("error: --batch and --width must be positive, --steps at least 3", file=sys.stderr)
        return 2
    return emit_results(args, bench_ddp(args.batch, args.width, args.steps), format_ddp_table)


def cmd_bench_buckets(args: argparse.Namespace) -> int:
    from distdocs.bench_ddp import bench_buckets, format_buckets_table

    try:
        caps = [float(c) for c in args.caps.split(",")]
    except ValueError:
        caps = []
    if not caps or any(not c > 0 for c in caps) or min(args.width, args.depth, args.batch) < 1 or args.steps < 3:
        print("error: --caps must be positive numbers (MB); --width, --depth and --batch positive, "
              "--steps at least 3", file=sys.stderr)
        return 2
    return emit_results(args, bench_buckets(caps, args.width, args.depth, args.batch, args.steps),
                        format_buckets_table)


def emit_results(args: argparse.Namespace, records: list[dict], format_table) -> int:
    """Print the table (or JSON), and with --save also write PREFIX.json and PREFIX.txt."""
    from distdocs.bench import machine_info

    machine = machine_info()
    table = format_table(records, machine)
    if args.save:
        with open(f"{args.save}.json", "w") as f:
            json.dump({"machine": machine, "records": records}, f, indent=2)
        with open(f"{args.save}.txt", "w") as f:
            f.write(table + "\n")
    print(json.dumps({"machine": machine, "records": records}, indent=2) if args.json else table)
    return 0


def parse_count(text: str) -> float:
    """'70B', '7e9', '125M' to a number."""
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}.get(text[-1:].upper(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text)
    except ValueError:
        value = -1.0
    if not value > 0 or math.isinf(value):
        raise ValueError(f"bad count {text!r}: use a positive number such as 70B, 125M or 7e9")
    return value * scale


def cmd_memory(args: argparse.Namespace) -> int:
    from distdocs import memory as m

    try:
        params = parse_count(args.params)
        states = m.bytes_per_parameter(args.precision, args.optimizer)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    act_args = (args.layers, args.hidden, args.seq_len, args.micro_batch)
    if any(a is not None for a in act_args) and not all(a and a > 0 for a in act_args):
        print("error: the activation estimate needs --layers, --hidden, --seq-len and --micro-batch, "
              "all positive", file=sys.stderr)
        return 2
    if args.devices < 1 or args.device_gib <= 0:
        print("error: --devices and --device-gib must be positive", file=sys.stderr)
        return 2
    acts = m.activation_bytes(*act_args) if all(act_args) else 0
    device = args.device_gib * m.GIB
    gib = lambda b: f"{b / m.GIB:9.1f} GiB"  # noqa: E731
    fits = lambda b: "fits" if b <= device else "does not fit"  # noqa: E731

    print(f"{params / 1e9:.1f} B parameters, {args.precision}, {args.optimizer}: "
          f"{states.total} bytes per parameter of model states")
    for name, per in states.parts().items():
        if per:
            print(f"  {name:<16} {per:>3} B/param {gib(params * per)}")
    total = params * states.total
    print(f"  {'model states':<16} {states.total:>3} B/param {gib(total)}")
    if acts:
        print(f"  {'activations':<16} {'':>9} {gib(acts)}  (estimate: 34*s*b*h bytes x {args.layers} layers, "
              f"s={args.seq_len}, b={args.micro_batch}, h={args.hidden})")
    print(f"one {args.device_gib:g} GiB device: {fits(total + acts)} (needs {gib(total + acts).strip()})")
    print(f"per device, data parallel over {args.devices} devices (model states + activations):")
    for strategy in m.SHARDED:
        each = m.per_device_model_states(params, states, strategy, args.devices) + acts
        print(f"  {strategy:<12} {gib(each)}  {fits(each)}")
    need = m.devices_to_fit(params, states, device, acts)
    print(f"split evenly across devices (tensor x pipeline parallel, activations split too): "
          f"at least {need} devices of {args.device_gib:g} GiB")
    return 0


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """--json and --save, which every benchmark takes (see emit_results)."""
    parser.add_argument("--json", action="store_true", help="print {machine, records} as JSON instead of the table")
    parser.add_argument("--save", metavar="PREFIX",
                        help="also write PREFIX.json and PREFIX.txt (the data the pages quote)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distdocs",
        description="Tools behind the distdocs guide to distributed training.",
    )
    parser.add_argument("--version", action="version", version=f"distdocs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser("doctor", help="report what this machine offers for distributed training")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=cmd_doctor)

    mem = sub.add_parser("memory", help="memory needed to train a model, and what sharding does to it")
    mem.add_argument("--params", required=True, help="parameter count: 70B, 125M, 7e9")
    mem.add_argument("--precision", default="bf16-mixed", help="fp32 or bf16-mixed (default)")
    mem.add_argument("--optimizer", default="adam", help="adam (default) or sgd (with momentum)")
    mem.add_argument("--devices", type=int, default=8, help="data-parallel devices (default: 8)")
    mem.add_argument("--device-gib", type=float, default=80, help="memory per device in GiB (default: 80)")
    for flag, text in [("--layers", "transformer layers"), ("--hidden", "hidden size"),
                       ("--seq-len", "sequence length"), ("--micro-batch", "sequences per device")]:
        mem.add_argument(flag, type=int, help=f"{text}, for the activation estimate")
    mem.set_defaults(func=cmd_memory)

    bench = sub.add_parser("bench", help="benchmarks, measured side by side in one run")
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    allreduce = bench_sub.add_parser(
        "allreduce", help="gloo's all_reduce against distdocs' ring, tree and naive: time, algbw, busbw")
    allreduce.add_argument("--world-sizes", default="2,4", help="comma-separated (default: 2,4)")
    allreduce.add_argument("--sizes", default="256K,4M,64M",
                           help="comma-separated byte counts, K/M/G binary (default: 256K,4M,64M)")
    allreduce.add_argument("--iters", type=int, default=10, help="timed iterations per size (default: 10)")
    allreduce.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default: 3)")
    allreduce.add_argument("--repeat", type=int, default=1,
                           help="run the whole sweep this many times and report medians and the "
                                "spread of the ratios (default: 1)")
    add_output_flags(allreduce)
    allreduce.set_defaults(func=cmd_bench_allreduce)

    pipeline = bench_sub.add_parser(
        "pipeline", help="idle time of each stage of a 2-stage GPipe pipeline against (p-1)/(m+p-1)")
    pipeline.add_argument("--microbatches", default="1,2,4,8", help="comma-separated (default: 1,2,4,8)")
    pipeline.add_argument("--width", type=int, default=1024, help="layer width (default: 1024)")
    pipeline.add_argument("--batch", type=int, default=256, help="samples per step (default: 256)")
    pipeline.add_argument("--steps", type=int, default=5, help="timed steps per count (default: 5)")
    add_output_flags(pipeline)
    pipeline.set_defaults(func=cmd_bench_pipeline)

    ddp = bench_sub.add_parser("ddp", help="samples/s of torch's DDP and distdocs' BucketedDDP, 2 ranks")
    ddp.add_argument("--batch", type=int, default=256, help="samples per rank and step (default: 256)")
    ddp.add_argument("--width", type=int, default=1024, help="MLP width (default: 1024)")
    ddp.add_argument("--steps", type=int, default=12, help="steps per implementation (default: 12)")
    add_output_flags(ddp)
    ddp.set_defaults(func=cmd_bench_ddp)

    buckets = bench_sub.add_parser(
        "buckets", help="torch DDP's bucket_cap_mb and gradient_as_bucket_view: step time and memory, 2 ranks")
    buckets.add_argument("--caps", default="1,5,25,100", help="bucket caps in MB (default: 1,5,25,100)")
    buckets.add_argument("--width", type=int, default=1024, help="MLP width (default: 1024)")
    buckets.add_argument("--depth", type=int, default=8, help="Linear layers (default: 8)")
    buckets.add_argument("--batch", type=int, default=8, help="samples per rank and step (default: 8)")
    buckets.add_argument("--steps", type=int, default=12, help="steps per setting (default: 12)")
    add_output_flags(buckets)
    buckets.set_defaults(func=cmd_bench_buckets)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
