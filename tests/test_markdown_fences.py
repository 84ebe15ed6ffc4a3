"""The fence classifier on a small page: every kind of fence, inside and outside content tabs."""

from __future__ import annotations

import pytest

from docexec.fences import classify

pytestmark = pytest.mark.fast  # the test tier: see the testing page

PAGE = """# A page

```python
assert 1 + 1 == 2
```

```{.python notest}
--8<-- "data_parallel/step01_manual_allreduce.py:sync_grads"
```

=== "CPU (gloo)"

    ```bash
    torchrun --standalone --nproc_per_node=2 examples/x/step01_y.py
    ```

    ```text title="Output"
    self-check passed
    ```

=== "GPU (nccl)"

    ```bash
    torchrun --standalone --nproc_per_node=gpu examples/x/step01_y.py
    ```

```bash
torchrun --nnodes=2 --node_rank=0 a.py &
torchrun --nnodes=2 --node_rank=1 a.py
wait
```

<!-- not executed: it serves the site until stopped -->
```bash
make serve
```

```text
an orphan block that nothing runs
```

```bash
pip install something
```
"""


def test_every_kind_of_fence_is_recognised(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    fences = classify(page)
    assert [f.kind for f in fences] == [
        "inline",
        "include",
        "command",
        "output",
        "command",
        "command",
        "not executed",
        "unverified",
        "unverified",
    ]
    _, include, cpu, output, gpu, background, excused, *_ = fences
    assert include.includes == ["data_parallel/step01_manual_allreduce.py:sync_grads"]
    assert (cpu.tab, cpu.gpu, gpu.tab, gpu.gpu) == ("CPU (gloo)", False, "GPU (nccl)", True)
    assert cpu.command == "torchrun --standalone --nproc_per_node=2 examples/x/step01_y.py"  # dedented
    assert output.attrs["after"] == cpu.command and output.tab == "CPU (gloo)"
    assert background.command.endswith("wait")
    assert excused.reason == "it serves the site until stopped"
    assert [f.line for f in fences][:2] == [3, 7]


def test_a_not_executed_comment_without_a_reason_excuses_nothing(tmp_path):
    """The coverage test counts a "not executed" fence as excused: it is one only with a reason."""
    page = tmp_path / "page.md"
    fence = "```bash\nmake serve\n```\n"
    page.write_text(f"<!-- not executed: -->\n{fence}\n<!-- not executed: a server -->\n{fence}")
    assert [(f.kind, f.reason) for f in classify(page)] == [("unverified", ""), ("not executed", "a server")]
