"""The comparison between a page's Output block and a fresh run must catch real changes."""

from shown_output import output_mismatch

SHOWN = "world size 2, 48 steps\nloss 0.0370\nmax |diff| = 1.0e-07\nself-check passed\n"


def test_rounding_noise_and_trailing_space_pass():
    assert output_mismatch(SHOWN, "world size 2, 48 steps  \nloss 0.0371\nmax |diff| = 2.3e-07\nself-check passed") is None


def test_real_changes_fail():
    assert "line 1" in output_mismatch(SHOWN, SHOWN.replace("48 steps", "49 steps"))  # integers are exact
    assert "line 2" in output_mismatch(SHOWN, SHOWN.replace("0.0370", "0.0400"))  # beyond 1e-3 relative
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("1.0e-07", "3.0e-05"))  # beyond 1e-5
    assert "line 4" in output_mismatch(SHOWN, SHOWN.replace("passed", "failed"))
    assert "lines" in output_mismatch(SHOWN, SHOWN + "extra\n")
