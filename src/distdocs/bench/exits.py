"""Do finished runs exit cleanly? Examples launched under torchrun again and again, in turns, counting
the launches in which a rank aborted at exit (`terminate called without an active exception`,
SIGABRT) and any other failure: a non-zero exit, a timeout, a process left running.

An abort at exit is rare and depends on timing, so one launch proves nothing: the soak's evidence is
its count. The default examples are the ones that aborted before their exit was fixed, and one of
each other kind that holds a process group."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from distdocs.arguments import require
from distdocs.bench.harness import machine_line
from distdocs.lab.exits import launch

# Each example as PATH:RANKS[:FLAGS]: the ones that aborted at exit before the fix, and one of each
# other kind that holds a process group (torch's DDP, tensor parallelism, pipelining, DeepSpeed ZeRO-3).
EXAMPLES = (
    "examples/model_parallel/step01_split_layers.py:2",
    "examples/sharded/step01_fsdp.py:4",
    "examples/data_parallel/step03_ddp_from_scratch.py:2",
    "examples/in_production/step01_2d_mesh.py:4",
    "examples/data_parallel/step02_ddp.py:2",
    "examples/tensor_parallel/step02_torch_tp.py:2",
    "examples/pipeline_parallel/step02_torch_pipelining.py:2",
    "examples/launchers/step02_deepspeed_zero.py:2:--zero-stage 3",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--examples",
        default=",".join(EXAMPLES),
        help="comma-separated PATH:RANKS[:FLAGS] (default: 8 examples that hold a process group)",
    )
    parser.add_argument("--launches", type=int, default=125, help="launches of each example (default: 125)")


def parse_examples(text: str) -> list[tuple[str, int, str]]:
    """'a.py:2,b.py:4:--flag 1' to [('a.py', 2, ''), ('b.py', 4, '--flag 1')]; each file must exist."""
    examples = []
    for item in text.split(","):
        path, ranks, flags = (item.strip().split(":", 2) + ["", ""])[:3]
        require(ranks.isdigit() and int(ranks) >= 1, f"{item!r}: give each example as PATH:RANKS[:FLAGS], as in a.py:2")
        require(Path(path).is_file(), f"{path}: no such file; run this from the repository's root")
        examples.append((path, int(ranks), flags))
    return examples


def main(args: argparse.Namespace, progress=None) -> list[dict]:
    require(args.launches >= 1, "--launches must be at least 1")
    examples = parse_examples(args.examples)
    tally = {
        ex: {"example": " ".join(filter(None, (ex[0], ex[2]))), "ranks": ex[1], "launches": 0, "aborts": 0,
             "other_failures": 0, "seconds": []}
        for ex in examples
    }  # fmt: skip
    notes: dict[tuple, list[str]] = {ex: [] for ex in examples}
    for i in range(args.launches):  # in turns, so that every example sees the same machine
        if progress and i % 10 == 0:
            progress(f"round {i + 1} of {args.launches}")
        for example in examples:
            outcome, seconds, excerpt = launch(*example)
            record = tally[example]
            record["launches"] += 1
            record["seconds"].append(seconds)
            if outcome == "abort":
                record["aborts"] += 1
            elif outcome != "ok":
                record["other_failures"] += 1
            if outcome != "ok" and len(notes[example]) < 5:
                notes[example].append(f"{outcome}: {excerpt}")
    records = []
    for example, record in tally.items():
        seconds = record.pop("seconds")
        records.append({**record, "median_s": statistics.median(seconds), "failures": notes[example]})
    return records


def format_table(records: list[dict], machine: dict) -> str:
    total = sum(r["launches"] for r in records)
    aborts = sum(r["aborts"] for r in records)
    lines = [
        machine_line(machine, f"{total} launches of torchrun --standalone, in turns"),
        f"{'example':<60} {'ranks':>5} {'launches':>8} {'aborts':>6} {'other failures':>14} {'median s':>8}",
    ]
    for r in records:
        lines.append(
            f"{r['example']:<60} {r['ranks']:>5} {r['launches']:>8} {r['aborts']:>6} "
            f"{r['other_failures']:>14} {r['median_s']:>8.1f}"
        )
    lines.append(f"{'all':<60} {'':>5} {total:>8} {aborts:>6} {sum(r['other_failures'] for r in records):>14}")
    for r in records:
        lines += [f"# {r['example']}: {note}" for note in r["failures"]]
    return "\n".join(lines)
