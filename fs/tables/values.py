"""A value of each column type: what it is in memory, how it is read from CSV or JSON text, and
how the views print it.

In memory (and in a minipage): ``int32``/``int64`` an int in range; ``float64`` a finite float
(JSON has no NaN or infinity, so neither is accepted); ``decimal(p,s)`` the int ``value·10^s``
with at most p digits; ``date`` days since 1970-01-01; ``timestamp`` microseconds since
1970-01-01 00:00 UTC; ``bool``; ``string`` a str encodable as UTF-8. NULL is None.

Printing is deterministic and depends on the value alone, so the rendered size of a column can
be added up when rows are appended and a view's size known without reading it. CSV: NULL is an
empty field; a string is quoted (quotes doubled) when it is empty or holds ``,``, ``"``, CR or
LF, so an empty string (``""``) and NULL differ; dates ``YYYY-MM-DD``; timestamps ISO 8601 in
UTC (``2024-05-01T12:00:00Z``, ``.ffffff`` when not whole seconds); bools ``true``/``false``.
JSON: the same texts, strings and dates quoted, ``null`` for NULL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Callable

from .schema import ColType

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_RANGES = {"int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}
_DECIMAL = re.compile(r"\s*([+-]?)(\d*)(?:\.(\d*))?\s*\Z")
_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def _int(kind: str) -> Callable[[str], int]:
    lo, hi = _RANGES[kind]

    def parse(text: str) -> int:
        v = int(text)
        if not lo <= v <= hi:
            raise ValueError(f"{v} is outside the range of {kind}")
        return v
    return parse


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text.strip()!r}: float64 values must be finite")
    return v


def _decimal(t: ColType) -> Callable[[str], int]:
    limit = 10 ** t.precision

    def parse(text: str) -> int:
        m = _DECIMAL.match(text)
        if m is None or not (m.group(2) or m.group(3)):
            raise ValueError(f"{text!r} is not a decimal number")
        sign, whole, frac = m.group(1), m.group(2) or "0", m.group(3) or ""
        if len(frac) > t.scale:
            if frac[t.scale :].strip("0"):
                raise ValueError(f"{text.strip()!r} has more than {t.scale} digits after the point")
            frac = frac[: t.scale]
        v = int(whole + frac.ljust(t.scale, "0"))
        if v >= limit:
            raise ValueError(f"{text.strip()!r} does not fit decimal({t.precision},{t.scale})")
        return -v if sign == "-" else v
    return parse


def _date(text: str) -> int:
    return (dt.date.fromisoformat(text.strip()) - EPOCH_DATE).days


def _timestamp(text: str) -> int:
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    t = dt.datetime.fromisoformat(s)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    d = t - EPOCH
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


def _bool(text: str) -> bool:
    s = text.strip().lower()
    if s == "true":
        return True
    if s == "false":
        return False
    raise ValueError(f"{text!r} is not true or false")


def _string(text: str) -> str:
    text.encode()  # a lone surrogate (from a JSON escape) cannot be stored
    return text


def text_parser(t: ColType) -> Callable[[str], object]:
    """Text (a CSV field, never empty: that is NULL) → the value; ValueError saying why not."""
    if t.kind in _RANGES:
        return _int(t.kind)
    return {"float64": _float, "decimal": _decimal(t) if t.kind == "decimal" else None, "date": _date,
            "timestamp": _timestamp, "bool": _bool, "string": _string}[t.kind]


def json_parser(t: ColType) -> Callable[[object], object]:
    """A JSON value (numbers with a fraction arrive as ``decimal.Decimal``) → the value."""
    text = text_parser(t)
    kind = t.kind

    def parse(v: object) -> object:
        if kind in _RANGES:
            if type(v) is not int:
                raise ValueError(f"{json_text(v)} is not an integer")
            return text(str(v))
        if kind in ("float64", "decimal"):
            if type(v) not in (int, decimal.Decimal) and not (kind == "decimal" and type(v) is str):
                raise ValueError(f"{json_text(v)} is not a number")
            return text(format(v, "f") if type(v) is decimal.Decimal else str(v))
        if kind == "bool":
            if type(v) is not bool:
                raise ValueError(f"{json_text(v)} is not true or false")
            return v
        if type(v) is not str:
            raise ValueError(f"{json_text(v)} is not a string")
        return text(v)
    return parse


def json_text(v: object) -> str:
    """A JSON value shortened for an error message."""
    s = json.dumps(v, default=str)
    return s if len(s) <= 40 else s[:37] + "..."


# ----- printing ----------------------------------------------------------------------------------
def _print_decimal(scale: int) -> Callable[[int], str]:
    def show(v: int) -> str:
        digits = str(abs(v)).rjust(scale + 1, "0")
        body = f"{digits[:-scale]}.{digits[-scale:]}" if scale else digits
        return "-" + body if v < 0 else body
    return show


def _print_date(v: int) -> str:
    return (EPOCH_DATE + dt.timedelta(days=v)).isoformat()


def _print_timestamp(v: int) -> str:
    t = EPOCH + dt.timedelta(microseconds=v)
    frac = f".{t.microsecond:06d}" if t.microsecond else ""
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}{frac}Z"


def _print_csv_string(v: str) -> str:
    if not v or _NEEDS_QUOTES.search(v):
        return '"' + v.replace('"', '""') + '"'
    return v


def csv_printer(t: ColType) -> Callable[[object], str]:
    """A non-NULL value → its CSV field."""
    return {"int32": str, "int64": str, "float64": repr, "decimal": _print_decimal(t.scale),
            "date": _print_date, "timestamp": _print_timestamp, "bool": lambda v: "true" if v else "false",
            "string": _print_csv_string}[t.kind]


def json_printer(t: ColType) -> Callable[[object], str]:
    """A non-NULL value → its JSON text."""
    if t.kind in ("date", "timestamp"):
        show = csv_printer(t)
        return lambda v: '"' + show(v) + '"'
    if t.kind == "string":
        return lambda v: json.dumps(v, ensure_ascii=False)
    return csv_printer(t)
