"""Human sizes on the command line: ``64M``, ``1.5G``, ``4096``, ``256KiB`` (powers of 1024)."""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes for ``text``; raises ValueError with the accepted forms if it is not a size."""
    m = _RE.match(text)
    if not m:
        raise ValueError(f"invalid size {text!r}: use a number with an optional K, M, G, T or P suffix")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value != int(value):
        raise ValueError(f"invalid size {text!r}: not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    for unit in ("P", "T", "G", "M", "K"):
        if n >= _UNITS[unit]:
            v = n / _UNITS[unit]
            return f"{v:.0f}{unit}iB" if v == int(v) else f"{v:.2f}{unit}iB"
    return f"{n}B"
