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
