"""An example-shaped script that leaves work for Python's normal shutdown, as a reader's training
script does:

    torchrun --standalone --nproc_per_node=2 tests/exit_scripts/normal_exit.py --out DIR

Each rank trains a DDP model from a DataLoader with 2 worker processes, kept alive at exit (persistent
workers), registers an atexit handler that writes DIR/atexit-RANK, and starts a non-daemon thread that
is still writing DIR/thread-RANK when main() returns. A normal exit runs the handler, joins the thread
(the file ends with END) and stops the workers. With --os-exit the script ends as the examples once
did, with os._exit(0), and loses all three.
"""

import argparse
import atexit
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

NPROC_PER_NODE = 2
TIMEOUT_S = 60
CHUNKS, CHUNK = 40, b"x" * 16384  # the thread writes 640 KiB in 40 chunks, about 0.4 s, then END
LOADERS = []  # keeps the loader's worker processes alive until the interpreter shuts down


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the files each rank writes")
    parser.add_argument("--os-exit", action="store_true", help="end with os._exit(0), skipping Python's shutdown")
    return parser.parse_args()


def write_slowly(path: str) -> None:
    with open(path, "wb") as f:
        for _ in range(CHUNKS):
            f.write(CHUNK)
            time.sleep(0.01)
        f.write(b"END\n")


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank = dist.get_rank()
    atexit.register(lambda: open(os.path.join(args.out, f"atexit-{rank}"), "w").write("ran\n"))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data), num_workers=2, persistent_workers=True)
    LOADERS.append(loader)
    torch.manual_seed(0)
    model = DDP(nn.Linear(16, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()
    threading.Thread(target=write_slowly, args=(os.path.join(args.out, f"thread-{rank}"),)).start()
    print(f"[rank {rank}] trained; the writer thread is running", flush=True)


def main() -> None:
    args = parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(args, device)
    finally:
        dist.destroy_process_group()
    if args.os_exit:
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
