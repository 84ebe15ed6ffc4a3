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


def checkpoint_on_time(model: nn.Module, opt, device: torch.device, every: float) -> None:
    """The checkpoint page's clock, as it was: rank 0's decision on the device, read back every step."""
    last = time.monotonic()  # on the CPU: a schedule, not a timer
    for _step in range(40):
        model(torch.ones(8, 4, device=device)).sum().backward()
        opt.step()
        due = torch.tensor([time.monotonic() - last >= every], dtype=torch.uint8, device=device)
        dist.broadcast(due, src=0)
        if due.item():  # flagged: host-read-every-step
            last = time.monotonic()  # on the CPU


def stop_requested(device: torch.device) -> bool:
    flag = torch.zeros(1, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def stop_requested_on_gloo(group) -> bool:
    flag = torch.zeros(1)  # on the CPU, for the gloo group
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def train_step(model: nn.Module, opt, device: torch.device) -> None:
    model(torch.ones(8, 4, device=device)).sum().backward()
    opt.step()


def train_until_asked(model: nn.Module, opt, device: torch.device, group) -> None:
    for step in range(40):
        train_step(model, opt, device)
        if stop_requested(device):  # flagged: host-read-every-step
            break
        if step % 10 == 0 and stop_requested(device):  # every 10 steps: the read is rare
            break
        if stop_requested_on_gloo(group):  # a CPU tensor: no wait for the GPU
            break
    for case in range(2):  # a loop over runs, not steps
        train_until_asked(model, opt, device, group) if case > 1 else stop_requested(device)
