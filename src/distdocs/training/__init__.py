"""The pieces that run inside a training job: what the lesson builds from scratch and what the
examples import. Each module's docstring says which page builds it.

- `collectives`: the ring, naive, tree and two-level allreduces, made of messages;
- `ddp`: `BucketedDDP`, data parallelism from hooks and buckets;
- `pipeline`: `gpipe_step`, a pipeline schedule written by hand;
- `attention`: `ring_attention`, attention over a sequence split across ranks;
- `checkpoint`: atomic, checksummed checkpoints and their retention;
- `timing`: the step and slowest-rank timers, written for GPUs too.

These modules import torch and each other, nothing else of distdocs, so that a reader who copies an
example needs only this folder beside it (docexec.copies lays out such a copy for every test run).
"""
