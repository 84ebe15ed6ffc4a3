"""The same two-stage pipeline with torch.distributed.pipelining, under GPipe and 1F1B schedules.

Launch (exactly 2 processes; the CPU and gloo are enough):

    torchrun --standalone --nproc_per_node=2 examples/pipeline_parallel/step02_torch_pipelining.py

PipelineStage wraps each rank's half of the model; a schedule runs the micro-batches through it.
ScheduleGPipe runs all forwards, then all backwards. Schedule1F1B starts backwards as soon as the
last stage can, alternating one forward with one backward, so each stage keeps at most p micro-batches'
activations instead of m. The self-check asserts that both train the same model as one process.
"""

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from distdocs.pipeline import make_two_stage_model, reference_stage, stage_of, toy_batches
from distdocs.runtime import distributed, print0

WIDTH = 128
BATCH = 32
STEPS = 10
LR = 0.05
MICROBATCHES = 4


def main() -> None:
    with distributed(world_size=2) as rt:
        mine_ref = reference_stage(rt.rank, rt.device, STEPS, BATCH, LR, WIDTH)  # one process, my half

        for schedule_class in (ScheduleGPipe, Schedule1F1B):
            part = stage_of(make_two_stage_model(WIDTH), rt.rank).to(rt.device)
            opt = torch.optim.SGD(part.parameters(), lr=LR)
            # --8<-- [start:schedule]
            stage = PipelineStage(part, stage_index=rt.rank, num_stages=rt.world_size, device=rt.device)
            schedule = schedule_class(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
            for x, y in toy_batches(STEPS, BATCH, rt.device):
                opt.zero_grad()
                if rt.rank == 0:
                    schedule.step(x)  # the first stage feeds the inputs
                else:
                    losses = []
                    schedule.step(target=y, losses=losses)  # the last stage computes the loss
                opt.step()
            # --8<-- [end:schedule]
            # float32 defaults: micro-batch gradients are added in another order than one batch.
            for a, b in zip(part.parameters(), mine_ref.parameters()):
                torch.testing.assert_close(a, b)
            print0(f"{schedule_class.__name__}, {MICROBATCHES} micro-batches: equal to one process")
        print0("self-check passed")


if __name__ == "__main__":
    main()
