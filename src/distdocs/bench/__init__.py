"""Benchmarks, each measured side by side in one run so that its ratios hold on a noisy shared machine.

Each benchmark is a module with the same three entry points, which `distdocs bench NAME` calls:
`add_arguments(parser)`, `main(args, progress) -> records` and `format_table(records, machine) -> str`;
one that also defines `plot(records, machine) -> str` gets a `--figure` flag (drawn with
`distdocs.figures`). A benchmark imports no other benchmark: what several share sits below them all.

- `harness`: what every benchmark shares: the machine record, the slowest-rank timer, medians, a toy
  MLP, the ranks' world over loopback or dialled links, the bytes a node sent, and saving;
- `allreduce_sweep`: allreduces timed size by size, which `allreduce` reports and others fit α and β to;
- `ddp_steps`: DDP steps split into computation and sync, which `scaling` reports and `prediction` predicts;
- `killed_run`: one torchrun run with a rank killed, each phase timed, for `recovery` and `torchft`.
"""
