"""The comparison between a page's Output block and a fresh run catches any change beyond one unit in
the last digit shown, or rounding noise that grows past float32's tolerance."""

import pytest

from docexec.outputs import excerpt_missing, output_mismatch

pytestmark = pytest.mark.fast  # the test tier: see the testing page

SHOWN = "world size 2, 48 steps\nloss 0.0370\nmax |diff| = 3e-08\nself-check passed\n"
DIGEST = "weights_sha256=1bc8885f522dca8fcc91e36af3cba228a2a0b9c1fa8ce962f35d076de47e2d2f\n"


def test_rounding_at_the_printed_precision_and_trailing_space_pass():
    assert (
        output_mismatch(SHOWN, "world size 2, 48 steps  \nloss 0.0371\nmax |diff| = 4e-08\nself-check passed") is None
    )
    assert output_mismatch(SHOWN, SHOWN.replace("3e-08", "2e-08")) is None
    # the same comparison on other CPUs, all printed by CI's machines
    for other in ("6e-08", "3e-07", "0e+00", "1e-06", "1e-05"):
        assert output_mismatch(SHOWN, SHOWN.replace("3e-08", other)) is None, other
    zero = SHOWN.replace("3e-08", "0e+00")
    assert output_mismatch(zero, SHOWN.replace("3e-08", "1e-06")) is None
    # a digest of trained weights is compared as a digest; tests compare runs on one machine
    other_digest = "weights_sha256=d0f5fafa412987ad0020cc6c82f826020a704ac493126fc99dea0080aa8ca6bd\n"
    assert output_mismatch(SHOWN + DIGEST, SHOWN + other_digest) is None


def test_real_changes_fail():
    assert "line 1" in output_mismatch(SHOWN, SHOWN.replace("48 steps", "49 steps"))  # integers are exact
    assert "line 2" in output_mismatch(SHOWN, SHOWN.replace("0.0370", "0.0372"))  # two units in the last digit
    assert "above 1e-05" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "2e-05"))  # no longer rounding
    assert "line 3" in output_mismatch(SHOWN, SHOWN.replace("3e-08", "3e-03"))
    big = SHOWN.replace("3e-08", "4e-03")  # larger than rounding: one unit in the last digit, as any float
    assert output_mismatch(big, SHOWN.replace("3e-08", "5e-03")) is None
    assert "line 3" in output_mismatch(big, SHOWN.replace("3e-08", "6e-03"))
    assert "line 2" in output_mismatch(SHOWN, SHOWN.replace("0.0370", "4.0e-02"))  # only noise gets the ceiling
    assert "line 5" in output_mismatch(SHOWN + DIGEST, SHOWN + "weights_sha256=1bc8885f\n")  # not a digest
    assert "line 4" in output_mismatch(SHOWN, SHOWN.replace("passed", "failed"))
    assert "lines" in output_mismatch(SHOWN, SHOWN + "extra\n")


def test_an_excerpt_ignores_numbers_and_the_column_widths_they_set_but_not_words():
    shown = "   0  0-1            973                      1946                    2.5\ntokens dropped: 0"
    run = "rank\n   0  0-1            973                      1946                   10.2\ntokens dropped: 0\n"
    assert excerpt_missing(shown, run) is None  # a time of 10 ms takes one column more than 2.5 ms
    assert excerpt_missing(shown, run.replace("0-1", "0 1")) is not None  # a dash is not a number
    assert excerpt_missing(shown, run.replace("dropped", "kept")) is not None
