"""Benchmarks, each measured side by side in one run so that its ratios hold on a noisy shared machine.

`harness` holds what every benchmark shares: the machine record, the slowest-rank timer, medians,
sizes, a toy MLP, and saving. Each other module is one benchmark with the same three entry points,
which `distdocs bench NAME` calls: `add_arguments(parser)`, `main(args, progress) -> records` and
`format_table(records, machine) -> str`; one that also defines `plot(records, machine) -> str` gets a
`--figure` flag (drawn with `distdocs.figures`).
"""
