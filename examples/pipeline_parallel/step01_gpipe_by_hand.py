"""GPipe by hand: two stages on two ranks, the batch cut into micro-batches.

Launch (exactly 2 processes; the CPU and gloo are enough):

    torchrun --standalone --nproc_per_node=2 examples/pipeline_parallel/step01_gpipe_by_hand.py

Each step, rank 0 runs the forward of micro-batch 1, sends it on, and starts micro-batch 2 while
rank 1 works on micro-batch 1. When every forward is done, the backwards run in reverse order.
Gradients add up over the micro-batches. Rank 0 prints, for several micro-batch counts m, the
bubble fraction (p-1)/(m+p-1) of the schedule, and the self-check asserts that every m trains the same
model as one process on the whole batch.
"""

import torch

from distdocs.pipeline import gpipe_step, make_two_stage_model, reference_stage, stage_of, toy_batches
from distdocs.runtime import distributed, print0

WIDTH = 128
BATCH = 32
STEPS = 10
LR = 0.05
MICROBATCH_COUNTS = (1, 2, 4, 8)


def main() -> None:
    with distributed(world_size=2) as rt:
        mine_ref = reference_stage(rt.rank, rt.device, STEPS, BATCH, LR, WIDTH)  # one process, my half

        p = rt.world_size  # pipeline stages
        print0(f"{'micro-batches m':>15} {'bubble (p-1)/(m+p-1)':>21} {'equal to one process':>21}")
        for m in MICROBATCH_COUNTS:
            stage = stage_of(make_two_stage_model(WIDTH), rt.rank).to(rt.device)
            opt = torch.optim.SGD(stage.parameters(), lr=LR)
            for x, y in toy_batches(STEPS, BATCH, rt.device):
                opt.zero_grad()
                gpipe_step(stage, rt.rank, x, y, m, WIDTH)
                opt.step()
            # float32 defaults: m micro-batch gradients are added in another order than one batch.
            for a, b in zip(stage.parameters(), mine_ref.parameters()):
                torch.testing.assert_close(a, b)
            print0(f"{m:>15} {(p - 1) / (m + p - 1):>21.3f} {'True':>21}")
        print0("self-check passed")


if __name__ == "__main__":
    main()
