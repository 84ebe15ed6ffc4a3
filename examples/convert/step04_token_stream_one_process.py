"""A language model's training script for one device, as many are written: a token stream cut into
columns, a hidden state carried across windows, a hand-written SGD update, and a best model.

    python examples/convert/step04_token_stream_one_process.py

It anneals the learning rate when the validation loss stops improving, stops early, and tests the best
model it saved. There is no init_process_group here: step05, its distributed version on the page on
converting a script, adds it and shows its own setup.
"""

import argparse
import math
import random

import torch
from torch import nn

VOCAB = 16
BATCH = 20  # columns of the training stream: the sequences trained side by side
EVAL_BATCH = 10
BPTT = 16  # tokens a step backpropagates through
EPOCHS = 16
LR = 8.0
CLIP = 0.25
MIN_DELTA = 1e-3  # an epoch that improves the validation loss less than this anneals the learning rate
PATIENCE = 2  # ... and this many such epochs in a row stop the training


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="best.pt", help="where the best model goes (default: best.pt)")
    return parser.parse_args()


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


class CharLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.rnn, self.head = nn.Embedding(VOCAB, 32), nn.GRU(32, 64), nn.Linear(64, VOCAB)

    def forward(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out), hidden

    def init_hidden(self, columns: int) -> torch.Tensor:
        return self.head.weight.new_zeros(1, columns, 64)


def evaluate(model: CharLM, data: torch.Tensor) -> float:
    """The mean loss per token over the whole stream."""
    model.eval()
    total, count, hidden = 0.0, 0, model.init_hidden(data.size(1))
    with torch.no_grad():
        for i in range(0, len(data) - 1, BPTT):
            x, y = data[i : i + BPTT], data[i + 1 : i + 1 + BPTT]
            out, hidden = model(x[: len(y)], hidden)
            total += nn.functional.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="sum").item()
            count += y.numel()
    model.train()
    return total / count


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # a model this small: more threads only wait for each other
    torch.manual_seed(0)
    model = CharLM()
    train, val, test = (
        batchify(token_stream(n, seed), b)
        for n, seed, b in ((8020, 1, BATCH), (1010, 2, EVAL_BATCH), (1010, 3, EVAL_BATCH))
    )
    best, lr, bad_epochs = math.inf, LR, 0
    for epoch in range(EPOCHS):
        hidden = model.init_hidden(BATCH)
        for i in range(0, len(train) - 1, BPTT):
            x, y = train[i : i + BPTT], train[i + 1 : i + 1 + BPTT]
            hidden = hidden.detach()  # backpropagate through this window only
            out, hidden = model(x[: len(y)], hidden)
            loss = nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())
            model.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
        val_loss = evaluate(model, val)
        print(f"epoch {epoch}: lr {lr:g}, validation loss {val_loss:.4f}")
        if val_loss < best - MIN_DELTA:
            best, bad_epochs = val_loss, 0
            torch.save(model.state_dict(), args.out)
        else:
            lr, bad_epochs = lr / 4, bad_epochs + 1
            if bad_epochs == PATIENCE:
                print(f"{PATIENCE} epochs without a better validation loss: stopping")
                break
    model.load_state_dict(torch.load(args.out, weights_only=True))
    print(f"best model: validation loss {best:.4f}, test loss {evaluate(model, test):.4f}")
    assert evaluate(model, val) == best, "the model read back is not the best one saved"
    assert best < 1.4, f"the model did not learn: validation loss {best:.4f}, where a guess scores 2.77"
    print("self-check passed")


if __name__ == "__main__":
    main()
