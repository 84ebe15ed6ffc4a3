"""Model parallelism by hand: the first half of the layers on rank 0, the second half on rank 1.

Launch (exactly 2 processes; the CPU and gloo are enough):

    torchrun --standalone --nproc_per_node=2 examples/model_parallel/step01_split_layers.py

Rank 0 runs the first two layers and sends the activations to rank 1; rank 1 runs the last two,
computes the loss, and sends the gradient of the activations back; each rank steps its own
optimizer. Rank 0 prints how many parameters, gradient and optimizer-state bytes each rank holds
next to one process holding the whole model, and the self-check asserts that after training both
halves are bitwise equal to one process that trained the whole model on the same batches.
"""

import torch
import torch.distributed as dist
from torch import nn

from distdocs.runtime import distributed, print0

WIDTH = 256
STEPS = 30
BATCH = 32
LR = 0.05
MOMENTUM = 0.9


def make_full_model(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)  # the same weights on both ranks, and in the reference
    return nn.Sequential(
        nn.Linear(16, WIDTH), nn.Tanh(), nn.Linear(WIDTH, WIDTH), nn.Tanh(),  # stage 0: rank 0
        nn.Linear(WIDTH, WIDTH), nn.Tanh(), nn.Linear(WIDTH, 1),  # stage 1: rank 1
    )


def batches(device):
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 16, generator=g)
        yield x.to(device), torch.sin(x.sum(dim=1, keepdim=True)).to(device)


def state_bytes(module: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, int, int]:
    """Bytes of parameters, gradients and optimizer state, counted from the tensors themselves."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in module.parameters() if p.grad is not None)
    states = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                 if torch.is_tensor(t))
    return params, grads, states


def main() -> None:
    with distributed(world_size=2) as rt:  # any other world size: one-line error, exit code 2
        full = make_full_model()
        stage = (full[:4] if rt.rank == 0 else full[4:]).to(rt.device)  # keep only my half
        opt = torch.optim.SGD(stage.parameters(), lr=LR, momentum=MOMENTUM)
        activation_shape = (BATCH, WIDTH)

        for x, y in batches(rt.device):
            opt.zero_grad()
            # --8<-- [start:step]
            if rt.rank == 0:
                h = stage(x)
                dist.send(h.detach(), dst=1)  # activations forward
                grad_h = torch.empty(activation_shape, device=rt.device)
                dist.recv(grad_h, src=1)  # ... idle while rank 1 works ...
                h.backward(grad_h)  # finish backprop through my layers
            else:
                h = torch.empty(activation_shape, device=rt.device)
                dist.recv(h, src=0)  # idle until rank 0's forward is done
                h.requires_grad_()  # so that backward gives us dloss/dh to send back
                loss = nn.functional.mse_loss(stage(h), y)
                loss.backward()
                dist.send(h.grad, dst=0)  # gradients backward
            opt.step()
            # --8<-- [end:step]

        # --8<-- [start:self_check]
        # One process, the whole model, the same batches.
        reference = make_full_model().to(rt.device)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)
        for x, y in batches(rt.device):
            ref_opt.zero_grad()
            nn.functional.mse_loss(reference(x), y).backward()
            ref_opt.step()
        my_half = reference[:4] if rt.rank == 0 else reference[4:]
        same = all(torch.equal(p, q) for p, q in zip(stage.parameters(), my_half.parameters()))

        mine = state_bytes(stage, opt)
        every = [None, None]
        dist.all_gather_object(every, (mine, same))
        whole = state_bytes(reference, ref_opt)
        print0(f"{'':>12} {'parameters':>11} {'gradients':>10} {'momentum':>9} {'share':>6}")
        print0(f"{'one process':>12} {whole[0]:>11} {whole[1]:>10} {whole[2]:>9} {'100%':>6}")
        for r, (b, _) in enumerate(every):
            print0(f"{f'rank {r}':>12} {b[0]:>11} {b[1]:>10} {b[2]:>9} {sum(b) / sum(whole):>6.1%}")
        print0(f"both halves bitwise equal to the one-process model after {STEPS} steps: "
               f"{all(s for _, s in every)}")
        assert all(s for _, s in every), "a stage drifted from the one-process model"
        assert sum(b[0] for b, _ in every) == whole[0]  # the split lost or duplicated nothing
        print0("self-check passed")
        # --8<-- [end:self_check]


if __name__ == "__main__":
    main()
