"""The language model of step04, made distributed: the page on converting a script walks through it.

    torchrun --standalone --nproc_per_node=2 examples/convert/step05_token_stream_ddp.py

Each rank trains on its own columns of the stream and every rank decides from the summed validation
loss; rank 0 saves the best model, and every rank reads it back. The self-check trains one process on
all the columns and compares. SIGTERM or Ctrl-C saves a checkpoint at the next step, and stops.
"""

import argparse
import math
import os
import random
import signal
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: imported later, its defaults pin the group
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# The launch command's --nproc_per_node, and how long a collective waits for a rank that stopped answering
# before it fails: torch's default is 30 minutes on gloo and 10 on nccl. A minute or less makes a stuck rank
# fail fast while you learn. A real job sets more than its longest pause outside collectives (a checkpoint
# save, evaluation on rank 0, compile or autotune warm-up), 1800 s or more, on gloo and nccl alike.
NPROC_PER_NODE = 2
TIMEOUT_S = 60

VOCAB = 16
BATCH = 20  # columns of the training stream, all ranks together: step04's batch, so its LR holds
EVAL_BATCH = 10
BPTT = 16  # tokens a step backpropagates through
EPOCHS = 16
LR = 8.0
CLIP = 0.25
MIN_DELTA = 1e-3  # an epoch that improves the validation loss less than this anneals the learning rate
PATIENCE = 2  # ... and this many such epochs in a row stop the training
STOP_EVERY = 10  # steps between the ranks' checks for a stop signal: each costs an all_reduce and, on a GPU, a sync


def log(*args) -> None:
    if dist.get_rank() == 0:
        print(*args, flush=True)


def usage_error(message: str) -> None:
    """Bad settings stop every rank before any process group exists. Rank 0 says why, in one line, and
    exits with code 2; the others leave quietly, with code 0, so that no rank's exit can make torchrun
    stop rank 0 before it has spoken."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(0)


def save_atomically(state: dict, path: str, group: dist.ProcessGroup | None = None) -> None:
    """Rank 0 of `group` writes a temporary file beside `path`, flushes it to disk, then renames it over
    `path`: a crash leaves the old checkpoint or the new one, never half of one. Every rank waits for it."""
    if dist.get_rank(group) == 0:
        folder = os.path.dirname(os.path.abspath(path))
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".checkpoint-", delete=False) as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes reach the disk before the new name does
        os.replace(f.name, path)  # atomic on POSIX: readers see the old file or the new one
        fd = os.open(folder, os.O_RDONLY)  # and make the rename itself durable
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    dist.barrier(group)  # nobody reads or trains past a checkpoint that is not on disk yet


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="best.pt", help="where the best model goes (default: best.pt)")
    parser.add_argument("--checkpoint", default="stopped.pt", help="where a stopped run saves (default: stopped.pt)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    # --8<-- [start:divides]
    world_size = int(os.environ.get("WORLD_SIZE", NPROC_PER_NODE))
    if BATCH % world_size or EVAL_BATCH % world_size:  # BATCH // world_size would drop the columns left over
        usage_error(
            f"{BATCH} training and {EVAL_BATCH} validation columns do not split evenly over {world_size} processes; "
            f"launch 1, 2, 5 or 10: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
        )
    # --8<-- [end:divides]
    return args


def token_stream(tokens: int, seed: int) -> torch.Tensor:
    """A stream from a fixed random Markov chain: the same text on every run, and learnable."""
    cumulative = torch.rand(VOCAB, VOCAB, generator=torch.Generator().manual_seed(0)).pow(8).cumsum(1).tolist()
    rng, out = random.Random(seed), [0]
    for _ in range(tokens - 1):
        out += rng.choices(range(VOCAB), cum_weights=cumulative[out[-1]])
    return torch.tensor(out)


def batchify(stream: torch.Tensor, columns: int) -> torch.Tensor:
    """Cut the stream into `columns` contiguous pieces, one per column: shape (time, columns)."""
    rows = len(stream) // columns
    return stream[: rows * columns].view(columns, rows).t().contiguous()


# --8<-- [start:shard]
def my_columns(data: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """This rank's share: contiguous columns, all of the rows, so every rank takes the same steps."""
    width = data.size(1) // dist.get_world_size(group)  # parse_args refused a world size that leaves some over
    return data[:, dist.get_rank(group) * width :][:, :width]


# --8<-- [end:shard]


class CharLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(VOCAB, 32), nn.GRU(32, 64), nn.Linear(64, VOCAB)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out), hidden

    def init_hidden(self, columns: int) -> torch.Tensor:
        return self.head.weight.new_zeros(1, columns, 64)


def evaluate(model: nn.Module, raw: CharLM, data: torch.Tensor, group: dist.ProcessGroup) -> tuple[float, int]:
    """The mean loss per token over the whole stream, and the tokens counted: summed over the ranks' columns."""
    model.eval()
    totals, hidden = torch.zeros(2, dtype=torch.float64, device=data.device), raw.init_hidden(data.size(1))
    with torch.no_grad():
        for i in range(0, len(data) - 1, BPTT):
            x, y = data[i : i + BPTT], data[i + 1 : i + 1 + BPTT]
            out, hidden = model(x[: len(y)], hidden)
            totals[0] += nn.functional.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="sum")
            totals[1] += y.numel()
    model.train()
    dist.all_reduce(totals, group=group)
    return (totals[0] / totals[1]).item(), int(totals[1])


# --8<-- [start:signals]
stop_requested = False


def request_stop(signum: int, frame) -> None:
    """SIGTERM from a scheduler, or Ctrl-C: torchrun passes either to every rank. Finish the step first."""
    global stop_requested
    stop_requested = True


# --8<-- [end:signals]


def fit(model: nn.Module, streams, args, device, group, say=log) -> tuple[list, float]:
    """step04's training, on this rank's columns. Returns each epoch's (lr, validation loss) and the test
    loss of the best model, or stops at a step boundary when any rank was asked to."""
    raw = model.module if isinstance(model, DDP) else model  # the script's own methods live on the module
    train, val, test = (my_columns(s, group).to(device) for s in streams)
    history, stop = [], torch.zeros(1, device=device)
    best, lr, bad_epochs = math.inf, LR, 0
    for epoch in range(EPOCHS):
        hidden = raw.init_hidden(train.size(1))  # this rank's columns, not BATCH
        for step, i in enumerate(range(0, len(train) - 1, BPTT)):
            # --8<-- [start:stop]
            if step % STOP_EVERY == 0:  # not every step: .item() waits for the GPU, ending its run-ahead
                stop[0] = stop_requested
                dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=group)  # any rank asked: all stop here
                if stop.item():
                    state = {"model": raw.state_dict(), "lr": lr, "epoch": epoch, "step": step}
                    save_atomically(state, args.checkpoint, group)  # a kill mid-write keeps the last one
                    say(f"stopped at epoch {epoch}, step {step}: saved {args.checkpoint}")
                    return history, math.nan
            # --8<-- [end:stop]
            x, y = train[i : i + BPTT], train[i + 1 : i + 1 + BPTT]
            hidden = hidden.detach()  # backpropagate through this window only
            out, hidden = model(x[: len(y)], hidden)
            loss = nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())
            model.zero_grad()
            loss.backward()  # DDP averages the ranks' gradients: every rank clips and steps the same ones
            nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
        val_loss, _ = evaluate(model, raw, val, group)
        history.append((lr, val_loss))
        say(f"epoch {epoch}: lr {lr:g}, validation loss {val_loss:.4f}")
        # --8<-- [start:decide]
        if val_loss < best - MIN_DELTA:  # the summed loss, the same number on every rank: the same decisions
            best, bad_epochs = val_loss, 0
            save_atomically(raw.state_dict(), args.out, group)  # rank 0 writes the plain module's weights
        else:
            lr, bad_epochs = lr / 4, bad_epochs + 1
            if bad_epochs == PATIENCE:
                say(f"{PATIENCE} epochs without a better validation loss: stopping")
                break
    # save_atomically ended in a barrier: rank 0 had written the file before any rank opens it
    raw.load_state_dict(torch.load(args.out, map_location=device, weights_only=True))
    # --8<-- [end:decide]
    test_loss, _ = evaluate(model, raw, test, group)
    say(f"best model: validation loss {best:.4f}, test loss {test_loss:.4f}")
    return history, test_loss


def run(args: argparse.Namespace, device: torch.device) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    streams = [
        batchify(token_stream(n, seed), b)
        for n, seed, b in ((8020, 1, BATCH), (1010, 2, EVAL_BATCH), (1010, 3, EVAL_BATCH))
    ]
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(CharLM().to(device, getattr(torch, args.dtype)))
    # --8<-- [start:register]
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    # --8<-- [end:register]
    log(f"{world_size} ranks, {BATCH // world_size} columns each")
    history, test_loss = fit(model, streams, args, device, dist.group.WORLD)
    if stop_requested:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # training is over: a signal now just ends the run
    signal.signal(signal.SIGINT, signal.default_int_handler)

    # --8<-- [start:self_check]
    # Every rank ends with the same weights, each column trained on one rank, each token evaluated once.
    world = dist.group.WORLD
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    assert torch.equal(mine, rank0), f"rank {rank}'s weights differ from rank 0's"
    seen = torch.zeros(BATCH, device=device)
    seen[my_columns(torch.arange(BATCH, device=device)[None], world)] += 1
    dist.all_reduce(seen)
    assert (seen == 1).all(), f"columns trained on no rank or on several: {seen.tolist()}"
    _, counted = evaluate(model, model.module, my_columns(streams[1], world).to(device), world)
    assert counted == streams[1][1:].numel(), f"the evaluation counted {counted} tokens"
    log(f"{BATCH} columns trained, each on one rank; {counted} validation tokens, each counted once")
    # Rank 0 trains as step04 does, one process on all the columns, in a group of its own.
    alone = dist.new_group([0])
    if rank == 0:
        torch.manual_seed(0)
        reference = CharLM().to(device, getattr(torch, args.dtype))
        with tempfile.TemporaryDirectory() as tmp:
            args.out = os.path.join(tmp, "best.pt")
            ref_history, ref_test_loss = fit(reference, streams, args, device, alone, say=lambda *_: None)
        # The ranks add step04's sums in another order, so the last bits differ, and this learning rate
        # grows them over the run: in float32 the weights part a little, the decisions do not.
        ref = torch.cat([p.detach().flatten() for p in reference.parameters()])
        same = [lr for lr, _ in history] == [lr for lr, _ in ref_history]
        loss_diff = max(abs(v - r) for (_, v), (_, r) in zip(history, ref_history))
        print(f"the same decisions as one process: {same}")
        print(f"max |ranks - one process|: validation loss {loss_diff:.0e}, weights {(mine - ref).abs().max():.0e}")
        assert same and loss_diff < 1e-2 and abs(test_loss - ref_test_loss) < 1e-3, (history, ref_history)
        if args.dtype == "float64":  # rounding at 1e-16 stays small: the same weights, within 1e-7
            torch.testing.assert_close(mine, ref)
        print("self-check passed")
    # --8<-- [end:self_check]


# --8<-- [start:setup]
def main() -> None:
    args = parse_args()  # before any process group: a bad flag stops every rank at once, exit code 2
    if "LOCAL_RANK" not in os.environ:  # started with python, not torchrun: say how, in one line
        sys.exit(f"error: launch with torchrun: torchrun --standalone --nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per process on a node
        if device.index >= torch.cuda.device_count():  # more processes than GPUs: nccl cannot share one
            sys.exit(
                f"error: local rank {device.index} has no GPU (this node has {torch.cuda.device_count()}); launch one "
                f"process per GPU, or run on the CPU: CUDA_VISIBLE_DEVICES= torchrun --standalone "
                f"--nproc_per_node={NPROC_PER_NODE} {sys.argv[0]}"
            )
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT_S))
    try:
        run(args, device)  # the work, in a function: what it builds is freed when it returns
    finally:
        dist.destroy_process_group()  # also when run() raises


if __name__ == "__main__":
    main()
# --8<-- [end:setup]
