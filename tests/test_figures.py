"""The figures on the practice pages are drawn from their saved data, and the data shows what the
pages say of it."""

from __future__ import annotations

import json

from distdocs import figures

from markdown_fences import REPO

LR_DATA = REPO / "benchmarks" / "lr-scaling-cpu.json"


def test_lr_figure_is_drawn_from_its_data():
    data = json.loads(LR_DATA.read_text())
    assert {"machine", "cores", "torch", "ranks", "date"} <= data["machine"].keys()
    assert (REPO / "docs/assets/lr-scaling-cpu.svg").read_text() == figures.lr_curves(data)


def test_saved_lr_curves_support_what_the_learning_rate_page_says():
    small, unscaled, scaled, huge = json.loads(LR_DATA.read_text())["curves"].values()
    assert unscaled[-1] > 3 * small[-1]  # "many times the small batch's ... at least three times"
    assert scaled[-1] <= 1.3 * small[-1]  # "ends within 30% of it"
    assert len(huge) <= 3 and not huge[-1] < 1.0  # "diverges within three epochs"


def test_figures_command_draws_the_file_and_rejects_bad_arguments(tmp_path, capsys):
    out = tmp_path / "lr.svg"
    assert figures.main(["lr-curves", str(LR_DATA), str(out)]) == 0
    assert out.read_text().startswith("<?xml")
    assert figures.main(["no-such-figure", str(LR_DATA), str(out)]) == 2
    assert capsys.readouterr().err.startswith("usage: ")
