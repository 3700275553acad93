"""A table's schema: its columns, in order, each with a type and whether it may hold NULL.

The text form is what a user writes to ``/tables/NAME/schema`` (and ``trax table create
--schema``): ``name type [not null]`` separated by commas, e.g. ``id int64 not null, price
decimal(12,2), shipped date, note string``. Types: ``int32``, ``int64``, ``float64``,
``decimal(p,s)`` (1 ≤ p ≤ 18, 0 ≤ s ≤ p: stored as a scaled 64-bit integer), ``date``,
``timestamp`` (microseconds, UTC), ``bool``, ``string`` (UTF-8, any length). Keywords are
case-insensitive; column names are identifiers (letters, digits, ``_``; not starting with a
digit), case-sensitive and unique, so they can name a projection file (``a,b.csv``) without
quoting. :func:`parse_schema` and :meth:`Schema.text` round-trip: the printed form is canonical.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_COLUMNS = 1000
NAME_MAX = 128
KINDS = ("int32", "int64", "float64", "decimal", "date", "timestamp", "bool", "string")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_COLUMN = re.compile(r"\s*(\S+)\s+([A-Za-z0-9]+)\s*(?:\(\s*(\d+)\s*,\s*(\d+)\s*\))?\s*(not\s+null)?\s*\Z",
                     re.IGNORECASE)


class SchemaError(ValueError):
    """A schema text that cannot be a table's schema; the message says where and why."""


@dataclass(frozen=True, slots=True)
class ColType:
    kind: str  # one of KINDS
    precision: int = 0  # decimal only
    scale: int = 0  # decimal only

    def text(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.kind == "decimal" else self.kind


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColType
    nullable: bool = True

    def text(self) -> str:
        return f"{self.name} {self.type.text()}" + ("" if self.nullable else " not null")


@dataclass(frozen=True, slots=True)
class Schema:
    columns: tuple[Column, ...]

    def text(self) -> str:
        """The canonical text (parses back to an equal schema)."""
        return ", ".join(c.text() for c in self.columns)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index(self, name: str) -> int:
        """The position of column ``name``; KeyError if there is none."""
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        raise KeyError(name)


def _split(text: str) -> list[str]:
    """The column definitions: commas outside parentheses separate them."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SchemaError(f"unbalanced ')' at character {i + 1}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SchemaError("unbalanced '(' (missing ')')")
    parts.append(text[start:])
    return parts


def parse_schema(text: str) -> Schema:
    """The schema ``text`` describes; :class:`SchemaError` naming the column and the reason."""
    if not text.strip():
        raise SchemaError("the schema is empty: give at least one column as 'name type'")
    columns: list[Column] = []
    seen: set[str] = set()
    for n, part in enumerate(_split(text.strip()), 1):
        m = _COLUMN.match(part)
        if m is None:
            raise SchemaError(f"column {n}: {part.strip()!r} is not 'name type [not null]'")
        name, kind, p, s, notnull = m.groups()
        if not _NAME.match(name) or len(name) > NAME_MAX:
            raise SchemaError(f"column {n}: {name!r} is not a column name (letters, digits and '_', not starting "
                              f"with a digit, at most {NAME_MAX} characters)")
        if name in seen:
            raise SchemaError(f"column {n}: {name!r} appears twice")
        seen.add(name)
        kind = kind.lower()
        if kind not in KINDS:
            raise SchemaError(f"column {n} ({name}): unknown type {kind!r} (types: {', '.join(KINDS)}; "
                              f"decimal as decimal(p,s))")
        if kind == "decimal":
            if p is None:
                raise SchemaError(f"column {n} ({name}): decimal needs its precision and scale: decimal(p,s)")
            p, s = int(p), int(s)
            if not 1 <= p <= 18 or not 0 <= s <= p:
                raise SchemaError(f"column {n} ({name}): decimal({p},{s}) must have 1 <= p <= 18 and 0 <= s <= p")
            ctype = ColType(kind, p, s)
        else:
            if p is not None:
                raise SchemaError(f"column {n} ({name}): type {kind} takes no parameters")
            ctype = ColType(kind)
        columns.append(Column(name, ctype, notnull is None))
    if len(columns) > MAX_COLUMNS:
        raise SchemaError(f"{len(columns)} columns (limit {MAX_COLUMNS})")
    return Schema(tuple(columns))
