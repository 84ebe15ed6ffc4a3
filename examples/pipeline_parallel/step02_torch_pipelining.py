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

from distdocs.runtime import distributed, print0

WIDTH = 128
BATCH = 32
STEPS = 10
LR = 0.05
MICROBATCHES = 4


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh(),  # stage 0
                         nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1))  # stage 1


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


def main() -> None:
    with distributed(world_size=2) as rt:
        reference = make_model().to(rt.device)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
        for x, y in batches(rt.device):
            ref_opt.zero_grad()
            nn.functional.mse_loss(reference(x), y).backward()
            ref_opt.step()
        mine_ref = reference[:4] if rt.rank == 0 else reference[4:]

        for schedule_class in (ScheduleGPipe, Schedule1F1B):
            full = make_model()
            part = (full[:4] if rt.rank == 0 else full[4:]).to(rt.device)
            opt = torch.optim.SGD(part.parameters(), lr=LR)
            # --8<-- [start:schedule]
            stage = PipelineStage(part, stage_index=rt.rank, num_stages=rt.world_size, device=rt.device)
            schedule = schedule_class(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
            for x, y in batches(rt.device):
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
