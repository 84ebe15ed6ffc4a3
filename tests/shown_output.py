"""Compare the output a page shows with what the command prints now.

Text must match exactly, line by line, with trailing spaces ignored. Numbers are compared as numbers:
- integers exactly (world sizes, step counts);
- floats within 1e-5 + 1e-3·|shown| + one unit in the last digit shown. 1e-5 is float32's default
  `atol` in torch.testing.assert_close: differences below it are rounding noise whose exact size
  depends on the CPU's vector width and BLAS (another machine prints 1.2e-07 where ours printed
  1.0e-07; Adam amplifies such noise to 1e-6). Larger values (losses, byte counts as floats) must
  agree to about three significant digits, which a real change in the code does not.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _last_digit_unit(text: str) -> float:
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def numbers_match(shown: str, actual: str) -> bool:
    if not any(c in shown + actual for c in ".eE"):
        return int(shown) == int(actual)
    a, b = float(actual), float(shown)
    return abs(a - b) <= 1e-5 + 1e-3 * abs(b) + _last_digit_unit(shown)


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
                return f"line {n}: page shows {x}, command printed {y} (beyond tolerance): {a!r}"
    return None
