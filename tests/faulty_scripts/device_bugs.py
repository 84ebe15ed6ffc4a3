"""The device check's seeded bugs: each class once, as the common-mistakes examples had them before
they were fixed, and the same code with the device handled, or the CPU meant and said. Never run; the
device check reads it (tests/test_device_check.py names the lines it must flag)."""

import datetime
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)  # BUG: no device
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # flagged: cpu-tensor-in-collective
    return t.item()


def slowest_fixed(seconds: float, device: torch.device) -> float:
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def gather_inline() -> list:
    out = [torch.empty(4) for _ in range(dist.get_world_size())]  # BUG: no device
    dist.all_gather(out, torch.ones(4).cuda())  # flagged: cpu-tensor-in-collective (out); the moved input passes
    return out


def moved_to_a_dtype() -> None:
    t = torch.zeros(1).to(torch.float64)  # BUG: a dtype, not a device
    dist.all_reduce(t)  # flagged: cpu-tensor-in-collective


def moved_without_keeping_the_copy(device: torch.device) -> None:
    t = torch.zeros(1)
    t.to(device)  # BUG: .to returns a copy, which is dropped
    dist.all_reduce(t)  # flagged: cpu-tensor-in-collective


def moved_and_kept(device: torch.device) -> None:
    t = torch.zeros(1)
    t = t.to(device)
    dist.all_reduce(t)


def on_a_gloo_side_group(group) -> None:
    flag = torch.zeros(1)  # on the CPU: this group is gloo's, beside the nccl one
    dist.all_reduce(flag, group=group)


def wrap(width: int) -> DDP:
    return DDP(nn.Linear(width, width))  # flagged: unmoved-model-in-ddp


def wrap_fixed(width: int, device: torch.device) -> DDP:
    model = nn.Linear(width, width)
    model = model.to(device)
    return DDP(model)


def wrap_torchft(width: int, Manager, DistributedDataParallel):  # torchft's: (manager, module)
    manager = Manager()
    return DistributedDataParallel(manager, nn.Linear(width, width))  # flagged: unmoved-model-in-ddp


def wrap_torchft_fixed(width: int, device: torch.device, Manager, DistributedDataParallel):
    manager = Manager()
    return DistributedDataParallel(manager, nn.Linear(width, width).to(device))


def train(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    model(x).sum().backward()
    return time.perf_counter() - start  # flagged: clock-without-synchronize


def train_with_a_clock_named_now(model: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    model(x).sum().backward()
    datetime.datetime.now()  # BUG: a method called now is not a synchronize
    return time.perf_counter() - start  # flagged: clock-without-synchronize


def train_fixed(model: nn.Module, x: torch.Tensor) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    model(x).sum().backward()
    torch.cuda.synchronize()
    return time.perf_counter() - start
