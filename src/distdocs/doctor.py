"""`distdocs doctor`: what this machine offers for distributed training, and whether the examples
can run on it."""

from __future__ import annotations

import os
import platform

from distdocs import __version__


def environment_report() -> dict:
    """Versions, devices and backends."""
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


def format_report(report: dict) -> str:
    width = max(len(k) for k in report)
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in value.items())
        lines.append(f"{key:<{width}}  {value}")
    return "\n".join(lines)


def problem(report: dict) -> str | None:
    """Why the examples cannot run here, or None."""
    if not (report["distributed_available"] and report["backends"]["gloo"]):
        return "this torch build has no torch.distributed with gloo; the examples need it"
    return None
