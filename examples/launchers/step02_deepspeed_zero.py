"""The data-parallel training of the first lesson, run by DeepSpeed with ZeRO stage 1, 2 or 3.

Launch (2 processes on the CPU, gloo; DeepSpeed's first start compiles a small op, about a minute):

    torchrun --standalone --nproc_per_node=2 examples/launchers/step02_deepspeed_zero.py --zero-stage 3

`deepspeed.initialize` wraps the model and the optimizer in an engine; `engine.backward(loss)` and
`engine.step()` replace `loss.backward()` and `opt.step()`. ZeRO-1 shards the optimizer state across
ranks, ZeRO-2 the gradients too, ZeRO-3 the parameters as well. Rank 0 prints what each rank holds;
the self-check asserts that the trained weights equal torch DDP's, trained in the same run on the
same shards, and one process trained on the full batches.
"""

import argparse
import contextlib
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# DeepSpeed picks its accelerator when it is imported; say which one instead of letting it guess.
os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
import deepspeed  # noqa: E402

# DeepSpeed 0.19 calls collectives that torch 2.13 renamed; the warning would repeat on every step.
warnings.filterwarnings("ignore", r".*(all_gather_into_tensor|reduce_scatter_tensor). is deprecated", FutureWarning)

from distdocs.reference import check_against_reference, make_model, make_regression_data  # noqa: E402
from distdocs.runtime import distributed, print0  # noqa: E402

GLOBAL_BATCH = 64
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def global_batches(data, device):
    """The same global batches on every rank, each as the list of per-rank shards."""
    x, y = data.tensors
    n = dist.get_world_size()
    for _ in range(EPOCHS):
        for start in range(0, len(x), GLOBAL_BATCH):
            xb, yb = x[start : start + GLOBAL_BATCH].to(device), y[start : start + GLOBAL_BATCH].to(device)
            yield list(zip(xb.chunk(n), yb.chunk(n)))


def local_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero-stage", type=int, choices=[1, 2, 3], default=1)
    stage = parser.parse_args().zero_stage

    with distributed(seed=0) as rt:
        # DeepSpeed logs to stdout, and prints a build line on every rank: send both to stderr.
        for handler in deepspeed.utils.logger.handlers:
            handler.setStream(sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            deepspeed.init_distributed(dist_backend=rt.backend)  # joins the group torchrun set up
        data = make_regression_data()
        batches = list(global_batches(data, rt.device))

        # --8<-- [start:engine]
        config = {
            "train_micro_batch_size_per_gpu": GLOBAL_BATCH // rt.world_size,
            "zero_optimization": {"stage": stage},
            "zero_allow_untested_optimizer": True,  # ZeRO is tested with Adam; SGD needs this
            "gradient_clipping": 0.0,  # DeepSpeed 0.19 clips to norm 1.0 unless told otherwise
        }
        model = make_model(seed=0).to(rt.device)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config)
        for shards in batches:
            x, y = shards[rt.rank]  # this rank's shard of the global batch
            loss = nn.functional.mse_loss(engine(x), y)
            engine.backward(loss)  # gradients reduced (ZeRO-2/3: reduce-scattered) across ranks
            engine.step()  # each rank updates its shard, then the shards are gathered (ZeRO-1/2)
        # --8<-- [end:engine]

        # --8<-- [start:self_check]
        params = list(engine.module.parameters())
        # ZeRO-3 keeps 1/n of each parameter in `ds_tensor`; the module's tensors are empty placeholders.
        held_params = local_bytes(p.ds_tensor if stage == 3 else p for p in params)
        held_state = local_bytes(t for s in opt.optimizer.state.values() for t in s.values() if t.dim() > 0)
        every = [None] * rt.world_size
        dist.all_gather_object(every, (held_params, held_state))
        full = local_bytes(make_model(seed=0).parameters())
        print0(f"ZeRO-{stage}: {'bytes':>10} {'parameters':>11} {'momentum':>9}")
        print0(f"{'the model, whole':>18} {full:>11} {full:>9}")
        for r, (p_bytes, s_bytes) in enumerate(every):
            print0(f"{f'held by rank {r}':>18} {p_bytes:>11} {s_bytes:>9}")

        ddp = DDP(make_model(seed=0).to(rt.device))
        ddp_opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
        for shards in batches:
            x, y = shards[rt.rank]
            ddp_opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            ddp_opt.step()
        with deepspeed.zero.GatheredParameters(params):  # ZeRO-3: all_gather the full weights to compare
            diff = max((p - q).abs().max().item() for p, q in zip(params, ddp.module.parameters()))
            print0(f"max |DeepSpeed ZeRO-{stage} - torch DDP| = {diff:.1e}")
            # float32 defaults (rtol 1.3e-6, atol 1e-5): both average the same shard gradients, but
            # DeepSpeed divides by the world size before it sums, DDP after.
            for p, q in zip(params, ddp.module.parameters()):
                torch.testing.assert_close(p, q)
            check_against_reference(engine.module, batches, seed=0, lr=LR, momentum=MOMENTUM)
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
