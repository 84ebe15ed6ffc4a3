"""Compare the output a page shows with what the command prints now.

Text must match exactly, line by line, with trailing spaces ignored. Numbers are compared at the
precision they are printed at:
- integers exactly (world sizes, step counts, bytes);
- floats within one unit in the last digit shown, so that a value on the edge of rounding may flip
  (0.0370 or 0.0371), and nothing more;
- rounding noise, printed with one significant digit and no decimal point (`3e-08`): where the page
  shows at most 1e-05, the run may print any value up to 1e-05, zero included; a larger one fails.
- a SHA-256 digest (64 hex digits) only as a digest.

Rounding noise is the largest difference between two computations that add in different orders.
Its value depends on the CPU's vector width and the kernels its BLAS picks for each shape: CI's
machines have printed 6e-08, 3e-08 and 3e-07 for one comparison (the TP page's), and 0e+00 on one
CPU where another printed 1e-06. What holds on every machine is that it stays below float32's tolerance, 1e-05
(`torch.testing.assert_close`'s absolute tolerance for float32), so that is what the page's number
is held to. The examples' self-checks carry the strict comparisons, bitwise where the arithmetic is
the same on every machine. A digest of trained weights changes with those last bits in the same way;
where a page says that two runs end with the same digest, a test runs both on one machine and
compares them.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
NOISE = re.compile(r"\d[eE][-+]?\d+")  # one significant digit, no decimal point: 3e-08
NOISE_CEILING = 1e-5  # assert_close's atol for float32: a difference below it is rounding, on any CPU
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")


def _last_digit_unit(text: str) -> float:
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def numbers_match(shown: str, actual: str) -> bool:
    if not any(c in shown + actual for c in ".eE"):
        return int(shown) == int(actual)
    if NOISE.fullmatch(shown) and NOISE.fullmatch(actual) and float(shown) <= NOISE_CEILING:
        return float(actual) <= NOISE_CEILING
    # A hair over one unit, so that binary rounding of the two decimals cannot fail an exact one-unit step.
    return abs(float(actual) - float(shown)) <= _last_digit_unit(shown) * (1 + 1e-9)


def output_mismatch(shown: str, actual: str) -> str | None:
    """None when `actual` prints what `shown` shows; else a one-line description of the first
    difference."""
    shown_lines = [DIGEST.sub("<sha256>", ln.rstrip()) for ln in shown.strip("\n").splitlines()]
    actual_lines = [DIGEST.sub("<sha256>", ln.rstrip()) for ln in actual.strip("\n").splitlines()]
    if len(shown_lines) != len(actual_lines):
        return f"the page shows {len(shown_lines)} lines, the command printed {len(actual_lines)}"
    for n, (s, a) in enumerate(zip(shown_lines, actual_lines), 1):
        if NUMBER.sub("#", s) != NUMBER.sub("#", a):
            return f"line {n}: page shows {s!r}, command printed {a!r}"
        for x, y in zip(NUMBER.findall(s), NUMBER.findall(a)):
            if not numbers_match(x, y):
                limit = "beyond one unit in its last digit"
                if NOISE.fullmatch(x) and float(x) <= NOISE_CEILING:
                    limit = f"rounding noise above {NOISE_CEILING:g}"
                return f"line {n}: page shows {x}, command printed {y} ({limit}): {a!r}"
    return None


def excerpt_missing(shown: str, actual: str) -> str | None:
    """None when every line of `shown` appears in some line of `actual`, numbers aside (pids, ports
    and times differ from run to run), and with them the width of the columns they are aligned in;
    else the first line that does not."""

    def aside(line: str) -> str:
        return " ".join(NUMBER.sub("#", line).split())

    actual_lines = [aside(ln) for ln in actual.splitlines()]
    for line in (ln.strip() for ln in shown.strip("\n").splitlines()):
        if line and not any(aside(line) in a for a in actual_lines):
            return f"the page shows {line!r}, which the command no longer prints"
    return None
