"""What the trax command line accepts as a size, a number, a duration or a name.

A malformed value is a usage error (exit 2), found by argparse before any command runs, with a
message that says what is accepted: a size that does not parse or is not positive, a number
outside its range, a duration that is not a finite number of seconds in its range, a name that
breaks the naming rule. A well-formed value that the object refuses (a stripe unit that is not
a power of two, more space than is free) is a refusal instead (exit 1), said by the command.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

from ..volume.errors import UsageError
from ..volume.model import check_name
from .sizes import parse_size

N = TypeVar("N", int, float)
SIZE_HELP = "a size such as 64M or 1G: suffixes K M G T P, powers of 1024"


class BadUsage(Exception):
    """A request that the command line cannot mean, found after parsing (options that do not
    go together, an ambiguous name): exit 2, like argparse's own errors."""


def size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: a size must be positive")
    return value


def _within(convert: Callable[[str], N], lo: float, hi: float, what: str, accepted: str) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            value = math.nan
        if not lo <= value <= hi:  # also refuses nan (and inf past a finite bound)
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: {accepted}")
        return value

    return parse


def seconds(lo: float, hi: float) -> Callable[[str], float]:
    """A duration in seconds within [lo, hi]."""
    return _within(float, lo, hi, "duration", f"give seconds from {lo:g} to {hi:g}")


def fraction(lo: float, hi: float) -> Callable[[str], float]:
    """A number within [lo, hi]."""
    return _within(float, lo, hi, "number", f"give a number from {lo:g} to {hi:g}")


def count(lo: int) -> Callable[[str], int]:
    """A whole number of at least ``lo``."""
    return _within(int, lo, math.inf, "number", f"give a whole number of at least {lo}")


_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_COUNT = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
NO_LIMIT = ("none", "null")


def _number_with_unit(text: str, units: dict[str, int]) -> float:
    """``text`` as a number with an optional unit suffix (case-insensitive) from ``units``."""
    t = text.strip().lower()
    unit = t[-1:] if t[-1:].isalpha() else ""
    if unit not in units:
        raise ValueError(f"unknown unit {unit!r}")
    return float(t[: len(t) - len(unit)]) * units[unit]


def duration(lo: float, hi: float, optional: bool = False) -> Callable[[str], float | None]:
    """A duration within [lo, hi] seconds, with an optional s, m, h or d suffix (``90m``,
    ``1h``); ``optional``: or ``none`` for no limit (None)."""
    accepted = f"give seconds from {lo:g} to {hi:.0f}, a suffix s, m, h or d (e.g. 1h)"
    return _or_none(_within(lambda t: _number_with_unit(t, _SECONDS), lo, hi, "duration",
                            accepted + (", or none for no limit" if optional else "")), optional)


def big_count(lo: int, hi: int, optional: bool = False) -> Callable[[str], int | None]:
    """A whole number within [lo, hi] with an optional k, M, G or T suffix (powers of 1000:
    ``10M`` is ten million); ``optional``: or ``none`` for no limit (None)."""
    accepted = f"give a whole number from {lo} to {hi}, a suffix k, M, G or T (e.g. 10M)"

    def whole(t: str) -> int:
        value = _number_with_unit(t, _COUNT)
        if value != int(value):
            raise ValueError(t)
        return int(value)

    return _or_none(_within(whole, lo, hi, "number", accepted + (", or none for no limit" if optional else "")),
                    optional)


def _or_none(parse: Callable[[str], N], optional: bool) -> Callable[[str], N | None]:
    def parse_or_none(text: str) -> N | None:
        return None if optional and text.strip().lower() in NO_LIMIT else parse(text)

    return parse_or_none


def name(kind: str) -> Callable[[str], str]:
    """A volume group or logical volume name (1-64 characters, see ``check_name``)."""

    def parse(text: str) -> str:
        try:
            return check_name(kind, text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def file_name(text: str) -> str:
    """One file name: not empty, no slash, not ``.`` or ``..``."""
    if not text or "/" in text or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"invalid file name {text!r}: one name, without '/'")
    return text


def vg_lv(text: str) -> tuple[str, str]:
    """``VG/LV``: a volume group's name and one of its logical volumes' names."""
    vg, sep, lv = text.partition("/")
    if not sep or not vg or not lv:
        raise argparse.ArgumentTypeError(f"expected VG/LV, got {text!r}")
    return name("volume group")(vg), name("logical volume")(lv)
