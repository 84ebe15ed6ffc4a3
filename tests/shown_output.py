"""Compare the output a page shows with what the command prints now.

Text must match exactly, line by line, with trailing spaces ignored. Numbers are compared at the
precision they are printed at:
- integers exactly (world sizes, step counts, bytes);
- floats within one unit in the last digit shown, so that a value on the edge of rounding may flip
  (0.0370 or 0.0371), and nothing more;
- rounding noise, printed with one significant digit and no decimal point (`3e-08`), within a factor
  of 4 either way, and zero exactly.

Rounding noise is the largest difference between two sums taken in different orders. Its exact value
depends on the CPU's vector width and BLAS (the same run printed 6e-08 on one CI machine and 3e-08 on
another), so only its size, to within two binary digits, is part of what the page claims: a page
that said 2e-07 where the run printed 3e-08 fails, and so does one that said 0e+00.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
NOISE = re.compile(r"\d[eE][-+]?\d+")  # one significant digit, no decimal point: 3e-08
NOISE_FACTOR = 4.0  # two binary digits: the spread of a max |difference| across CPUs and BLAS builds


def _last_digit_unit(text: str) -> float:
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def numbers_match(shown: str, actual: str) -> bool:
    if not any(c in shown + actual for c in ".eE"):
        return int(shown) == int(actual)
    if NOISE.fullmatch(shown) and NOISE.fullmatch(actual):
        s, a = float(shown), float(actual)
        if s == 0 or a == 0:
            return s == a  # bitwise equal stays bitwise equal
        return 1 / NOISE_FACTOR <= a / s <= NOISE_FACTOR
    # A hair over one unit, so that binary rounding of the two decimals cannot fail an exact one-unit step.
    return abs(float(actual) - float(shown)) <= _last_digit_unit(shown) * (1 + 1e-9)


def output_mismatch(shown: str, actual: str) -> str | None:
    """None when `actual` prints what `shown` shows; else a one-line description of the first
    difference."""
    shown_lines = [ln.rstrip() for ln in shown.strip("\n").splitlines()]
    actual_lines = [ln.rstrip() for ln in actual.strip("\n").splitlines()]
    if len(shown_lines) != len(actual_lines):
        return f"the page shows {len(shown_lines)} lines, the command printed {len(actual_lines)}"
    for n, (s, a) in enumerate(zip(shown_lines, actual_lines), 1):
        if NUMBER.sub("#", s) != NUMBER.sub("#", a):
            return f"line {n}: page shows {s!r}, command printed {a!r}"
        for x, y in zip(NUMBER.findall(s), NUMBER.findall(a)):
            if not numbers_match(x, y):
                limit = "beyond one unit in its last digit"
                if NOISE.fullmatch(x):
                    limit = f"beyond a factor of {NOISE_FACTOR:g}"
                return f"line {n}: page shows {x}, command printed {y} ({limit}): {a!r}"
    return None


def excerpt_missing(shown: str, actual: str) -> str | None:
    """None when every line of `shown` appears in some line of `actual`, numbers aside (pids, ports
    and times differ from run to run); else the first line that does not."""
    actual_lines = [NUMBER.sub("#", ln) for ln in actual.splitlines()]
    for line in (ln.strip() for ln in shown.strip("\n").splitlines()):
        if line and not any(NUMBER.sub("#", line) in a for a in actual_lines):
            return f"the page shows {line!r}, which the command no longer prints"
    return None
