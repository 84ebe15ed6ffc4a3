"""A training script for one device, as it stands before it is made distributed: the starting point of
the page on converting a script.

    python examples/convert/step01_one_process.py

It trains a small classifier (with BatchNorm) on synthetic data, evaluates it after every epoch and
saves the weights. There is no init_process_group here yet: step02 adds it, and the page shows the diff.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 4
BATCH = 64  # samples per optimizer step
LR = 0.05


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="model.pt", help="where the trained weights go (default: model.pt)")
    return parser.parse_args()


def make_data(samples: int, seed: int) -> TensorDataset:
    """Points of ten classes around ten fixed centres: the same data on every run."""
    centres = torch.randn(10, 32, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (samples,), generator=g)
    return TensorDataset(centres[labels] + 1.5 * torch.randn(samples, 32, generator=g), labels)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 10))


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    """The mean loss and the accuracy over every sample of the loader."""
    model.eval()
    totals = torch.zeros(3, device=device)  # summed loss, correct predictions, samples
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            totals[0] += nn.functional.cross_entropy(out, y, reduction="sum")
            totals[1] += (out.argmax(1) == y).sum()
            totals[2] += len(y)
    model.train()
    loss, correct, count = totals.tolist()
    return loss / count, correct / count


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set, val_set = make_data(8192, seed=1), make_data(2048, seed=2)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loader = DataLoader(
        train_set, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0),
        num_workers=2, pin_memory=device.type == "cuda",
    )  # fmt: skip
    val_loader = DataLoader(val_set, batch_size=256)
    for epoch in range(EPOCHS):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        val_loss, accuracy = evaluate(model, val_loader, device)
        print(f"epoch {epoch}: validation loss {val_loss:.3f}, accuracy {accuracy:.1%}")
    torch.save(model.state_dict(), args.out)
    print(f"saved the weights to {args.out}")
    assert accuracy > 0.9, f"the classifier did not learn: accuracy {accuracy:.1%}"
    print("self-check passed")


if __name__ == "__main__":
    main()
