"""The comparison between a page's Output block and a fresh run catches any change beyond one unit in
the last digit shown, or, for rounding noise, beyond a factor of 4."""

from shown_output import output_mismatch

SHOWN = "world size 2, 48 steps\nloss 0.0370\nmax |diff| = 3e-08\nself-check passed\n"


def test_rounding_at_the_printed_precision_and_trailing_space_pass():
    assert (
        output_mismatch(SHOWN, "world size 2, 48 steps  \nloss 0.0371\nmax |diff| = 4e-08\nself-check passed") is None
    )
    assert output_mismatch(SHOWN, SHOWN.replace("3e-08", "2e-08")) is None
    assert output_mismatch(SHOWN, SHOWN.replace("3e-08", "6e-08")) is None  # the same sums on another CPU
    assert output_mismatch(SHOWN, SHOWN.replace("3e-08", "1e-07")) is None  # within a factor of 4


def test_real_changes_fail():
    assert "line 1" in output_mismatch(SHOWN, SHOWN.replace("48 steps", "49 steps"))  # integers are exact
    assert "line 2" in output_mismatch(SHOWN, SHOWN.replace("0.0370", "0.0372"))  # two units in the last digit
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "2e-07"))  # beyond a factor of 4
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "3e-07"))  # another order of magnitude
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "7e-09"))  # beyond a factor of 4, smaller
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "0e+00"))  # no longer any difference
    zero = SHOWN.replace("3e-08", "0e+00")
    assert "line 3" in output_mismatch(zero, SHOWN.replace("3e-08", "1e-45"))  # bitwise equal is exact
    assert "line 2" in output_mismatch(SHOWN, SHOWN.replace("0.0370", "4.0e-02"))  # only noise gets the factor
    assert "line 4" in output_mismatch(SHOWN, SHOWN.replace("passed", "failed"))
    assert "lines" in output_mismatch(SHOWN, SHOWN + "extra\n")
