"""The `distdocs` command line."""

from __future__ import annotations

import argparse
import json
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
    from distdocs.bench import bench_allreduce, format_allreduce_table, machine_info, parse_size

    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
        world_sizes = [int(w) for w in args.world_sizes.split(",")]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if any(w < 1 for w in world_sizes) or args.iters < 1 or args.warmup < 0:
        print("error: world sizes and --iters must be at least 1, --warmup at least 0", file=sys.stderr)
        return 2
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    records = bench_allreduce(world_sizes, sizes, args.iters, args.warmup, progress)
    machine = machine_info()
    table = format_allreduce_table(records, machine)
    if args.save:
        with open(f"{args.save}.json", "w") as f:
            json.dump({"machine": machine, "records": records}, f, indent=2)
        with open(f"{args.save}.txt", "w") as f:
            f.write(table + "\n")
    print(json.dumps({"machine": machine, "records": records}, indent=2) if args.json else table)
    return 0


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

    bench = sub.add_parser("bench", help="benchmarks, measured side by side in one run")
    bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    allreduce = bench_sub.add_parser(
        "allreduce", help="gloo's all_reduce against distdocs' ring_allreduce: time, algbw, busbw")
    allreduce.add_argument("--world-sizes", default="2,4", help="comma-separated (default: 2,4)")
    allreduce.add_argument("--sizes", default="256K,4M,64M",
                           help="comma-separated byte counts, K/M/G binary (default: 256K,4M,64M)")
    allreduce.add_argument("--iters", type=int, default=10, help="timed iterations per size (default: 10)")
    allreduce.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default: 3)")
    allreduce.add_argument("--json", action="store_true",
                           help="print {machine, records} as JSON instead of the table")
    allreduce.add_argument("--save", metavar="PREFIX",
                           help="also write PREFIX.json and PREFIX.txt (the data the pages quote)")
    allreduce.set_defaults(func=cmd_bench_allreduce)
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
