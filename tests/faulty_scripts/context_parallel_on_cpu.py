"""torch's own context parallelism (torch.distributed.tensor.experimental.context_parallel) on CPU
tensors, over a mesh of 2 ranks: a causal scaled_dot_product_attention inside the context. The
context-parallelism page quotes what torch 2.13 answers; tests/test_context_parallel.py runs this and
holds the page to it.

One process with torch's fake process group of 2 ranks: the error comes from DTensor's dispatch, before
any communication. (With 2 gloo ranks it is the same error, but the failed context leaves the mesh,
and so the gloo group, held by DTensor's decomposition-strategy cache and by the wrapper that
context_parallel installs, past destroy_process_group.)"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.testing._internal.distributed.fake_pg import FakeStore

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
try:
    mesh = init_device_mesh("cpu", (2,))
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        print("context_parallel ran on CPU", flush=True)
    except NotImplementedError as e:
        print(f"NotImplementedError: {e}", flush=True)
finally:
    dist.destroy_process_group()
