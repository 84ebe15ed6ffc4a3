"""The figures on the practice pages are drawn from their saved data, and the data shows what the
pages say of it."""

from __future__ import annotations

import json
import re

import pytest

from distdocs import figures

from docexec.fences import REPO
from tools.figures import draw, tensor_parallel_sizes
from tools.figures import main as figures_command

pytestmark = pytest.mark.fast  # the test tier: see the testing page

LR_DATA = REPO / "measurements" / "lr-scaling-cpu.json"


def test_lr_figure_is_drawn_from_its_data():
    data = json.loads(LR_DATA.read_text())
    assert {"machine", "cores", "torch", "ranks", "date"} <= data["machine"].keys()
    assert (REPO / "docs/assets/lr-scaling-cpu.svg").read_text() == figures.loss_curves(data)


def test_saved_lr_curves_support_what_the_learning_rate_page_says():
    small, unscaled, scaled, cold, huge = json.loads(LR_DATA.read_text())["curves"].values()
    assert unscaled[-1] > 3 * small[-1]  # "many times the small batch's ... at least three times"
    assert scaled[-1] <= 1.3 * small[-1]  # "ends within 30% of it"
    assert cold[-1] <= 1.3 * small[-1]  # "the scaled run without a warmup ends as close"
    assert len(huge) <= 3 and not huge[-1] < 1.0  # "diverges within three epochs"


def test_figures_command_draws_the_file_and_rejects_bad_arguments(tmp_path, capsys):
    out = tmp_path / "lr.svg"
    assert figures_command(["loss-curves", str(LR_DATA), str(out)]) == 0
    assert out.read_text().startswith("<?xml")
    assert figures_command(["no-such-figure", str(LR_DATA), str(out)]) == 2
    assert capsys.readouterr().err.startswith("usage: ")


LOCAL_SGD_DATA = REPO / "measurements" / "local-sgd-cpu.json"


def test_local_sgd_figure_is_drawn_from_its_data():
    data = json.loads(LOCAL_SGD_DATA.read_text())
    assert (REPO / "docs/assets/local-sgd-cpu.svg").read_text() == figures.loss_curves(data)


def test_saved_local_sgd_curves_support_what_the_sync_page_says():
    curves = list(json.loads(LOCAL_SGD_DATA.read_text())["curves"].values())
    sync = curves[0]
    # "the loss lags behind synchronous training at the same epoch, most in the runs that average
    # least often (epoch 3 shows it best)"
    assert all(c[e] >= sync[e] for c in curves for e in range(len(sync)))
    at_epoch_3 = [c[2] for c in curves]
    assert at_epoch_3 == sorted(at_epoch_3) and at_epoch_3[-1] >= 1.2 * sync[2]
    assert all(c[-1] <= 1.2 * sync[-1] for c in curves)  # "all end close to DDP ... within 20%"


def test_tensor_parallel_drawing_is_drawn_at_the_examples_sizes():
    example = REPO / "examples/tensor_parallel/step01_by_hand.py"
    svg = (REPO / "docs/assets/tensor-parallel.svg").read_text()
    assert svg == draw("tensor-parallel", example.read_text())
    assert tensor_parallel_sizes(example.read_text()) == (64, 256, 8, 2)  # D_MODEL, D_HIDDEN, batch, ranks
    assert svg == figures.tensor_parallel(64, 256, 8, 2)
    assert "64×256" in svg or "64×256" in svg


def test_in_production_chart_draws_the_pages_sim_commands_and_supports_its_alt_text():
    page = (REPO / "docs/operations/in-production.md").read_text()
    assert (REPO / "docs/assets/in-production-speedups.svg").read_text() == draw("sim-commands", page)
    import re
    import shlex

    from distdocs import cli
    from distdocs.calculators import costmodel

    at8 = []
    for line in re.findall(r"^\s*distdocs (sim .*)$", page, re.M):
        args = cli.build_parser().parse_args(shlex.split(line))
        work, network, _ = cli.sim_inputs(args)
        steps = costmodel.predict_steps(work, [1, 2, 8], network, args.algorithm)
        at8.append(steps[2].speedup)
    pcie, pcie_k4 = at8
    # "on PCIe one micro-batch per step gives about 4x at 8 ranks, and 4 micro-batches bring it closer
    # to the ideal"
    assert 3.5 <= pcie <= 4.5 and pcie < pcie_k4 < 8


@pytest.mark.fast
def test_the_figures_are_compared_with_the_locked_matplotlib():
    """The saved SVGs are compared byte for byte with what matplotlib draws now, which holds only for
    the version they were drawn with: requirements.lock's, the one set of packages the tests support
    (the testing page says so). Under another, this says why the figure tests fail; `make bench`
    redraws the figures."""
    import matplotlib

    locked = re.search(r"^matplotlib==(\S+)", (REPO / "requirements.lock").read_text(), re.M).group(1)
    assert matplotlib.__version__ == locked, (
        f"matplotlib {matplotlib.__version__} is installed, the lock pins {locked}: install requirements.lock"
    )


def alt_numbers(page: str, svg: str) -> list[int]:
    """The numbers in the alt text of the image `svg` on `page` (docs/...md), commas removed; those inside
    a word (fp32, 16-bit) aside."""
    alt = re.search(rf"!\[([^\]]*)\]\(\.\./assets/{re.escape(svg)}\)", (REPO / page).read_text())
    assert alt, f"{page} does not show {svg}"
    return [int(n.replace(",", "")) for n in re.findall(r"(?<![\w-])\d[\d,]*(?![\w-])", alt[1])]


def test_the_layouts_chart_is_drawn_from_the_memory_calculator_and_its_alt_text_agrees():
    from distdocs.calculators import memory

    assert (REPO / "docs/assets/precision-layouts.svg").read_text() == figures.precision_layouts()
    expected = []
    for layout in figures.PAGE_LAYOUTS:  # each layout's nonzero parts in the chart's order, then the total
        states = memory.bytes_per_parameter(layout, "adam")
        expected += [b for b in states.parts().values() if b] + [states.total]
    found = alt_numbers("docs/lesson/choosing-a-strategy.md", "precision-layouts.svg")
    assert found == expected, "the alt text's bytes differ from the calculator's"
    assert [memory.bytes_per_parameter(layout).total for layout in figures.PAGE_LAYOUTS] == [16, 16, 18, 20]


def test_the_sharded_chart_draws_the_pages_checked_outputs_and_its_alt_text_agrees():
    """The chart is drawn from the sharded page's output blocks, which test_docs.py compares with the
    example's runs at 2 and 4 ranks, so a changed example fails there or here, not silently."""
    page = (REPO / "docs/lesson/sharded-data-parallelism.md").read_text()
    svg = (REPO / "docs/assets/sharded-bytes.svg").read_text()
    assert svg == draw("sharded-bytes", page)
    rows = re.findall(r"^\s*(DDP|FSDP), rank (\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", page, re.M)
    ddp = {tuple(map(int, r[2:])) for r in rows if r[0] == "DDP"}
    assert len(ddp) == 1
    (ddp,) = ddp
    expected = [*ddp, sum(ddp)]
    for n in (2, 4):
        fsdp = [d // n for d in ddp]
        assert {tuple(map(int, r[2:])) for r in rows if r[0] == "FSDP" and int(r[1]) == n - 1} >= {tuple(fsdp)}
        expected += [n, *fsdp, sum(fsdp)]
    assert alt_numbers("docs/lesson/sharded-data-parallelism.md", "sharded-bytes.svg") == expected
    assert "1/2" in svg and "1/4" in svg
