"""The lab's equipment: what the site measures and tests with, which no example imports.

- `world`: gloo ranks spawned on a FileStore, kept alive between calls, for tests and benchmarks;
- `links`: nodes in network namespaces joined by links whose rate tc dials;
- `slurm`: a SLURM cluster of such nodes, with its daemons, for the job script's tests;
- `emulated`: emulated accelerators, whose compute is a wait, inside torch's own DDP (the scale model);
- `exits`: one torchrun launch, and how it ended (the exit soak's launcher).

Readers use what sits beside this package (the calculators, the cost model, the `distdocs` command);
examples import only the pieces their pages build (docexec.copies.ALLOWED_IN_EXAMPLES).
"""
