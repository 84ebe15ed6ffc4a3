"""The calculators: arithmetic about training, run in one process, which the pages, the lab, the
explorer and the `distdocs` command share.

- `memory`: the bytes that training a model needs, and what sharding or splitting does to them;
- `costmodel`: the α–β model of one data-parallel step, and `predict_steps` over many world sizes;
- `fits`: the model's α and β fitted to saved benchmark records, and loaded back;
- `mfu`: FLOPs per token and model FLOPs utilisation;
- `sync_simulation`: data-parallel sync simulated in one process (workers are list entries), for
  the lab, with a trace of who holds which partial sum and what each sent.
"""
