"""Parsing a file to ingest against a table's schema: all its rows, or an error naming the line
and column of the first problem (the file is then rejected whole).

CSV (RFC 4180 with a header row naming every column of the table, in any order): fields
separated by ``,``, records by LF or CRLF; a field may be quoted with ``"`` (quotes inside
doubled), and then holds commas, quotes and line breaks. An **unquoted empty field is NULL**, a
quoted one (``""``) the empty string — as Spark writes them (give Spark ``escape='"'``: its
default escapes quotes with a backslash, which is not CSV). JSON lines: one object per line,
keys the table's columns (a missing key is NULL, as Spark leaves out null fields), numbers read
exactly (a decimal never goes through a float). Blank lines are skipped in both. An empty file
has no rows.
"""

from __future__ import annotations

import csv
import decimal
import io
import json
import re
from collections.abc import Callable

from .schema import Schema
from .values import json_parser, text_parser


class IngestError(ValueError):
    """A file that cannot be ingested: ``line`` and ``column`` (1-based; 0: the whole file)."""

    def __init__(self, line: int, column: int | str, reason: str):
        self.line, self.column, self.reason = line, column, reason
        super().__init__(f"line {line}, column {column}: {reason}")


_FIELD = re.compile(r'"((?:[^"]|"")*)"|([^,"\r\n]*)')
_SEP = re.compile(r",|\r\n|\n|\r|\Z")


def _decode(data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as ex:
        line = data.count(b"\n", 0, ex.start) + 1
        raise IngestError(line, 0, f"not UTF-8 (byte {ex.start} of the file)") from None
    return text[1:] if text.startswith("\ufeff") else text


def _records_plain(text: str) -> list[tuple[int, list]]:
    """(line, fields) of every record, for text without ``""`` (then an empty field can only be
    unquoted: NULL): the C reader of the standard library."""
    out = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    line = 1
    try:
        for fields in reader:
            out.append((line, [f if f != "" else None for f in fields]))
            line = reader.line_num + 1
    except csv.Error as ex:
        raise IngestError(line, 0, f"malformed CSV in the record starting here: {ex}") from None
    return out


def _records_quoted(text: str) -> list[tuple[int, list]]:
    """(line, fields) of every record, telling a quoted empty field (``""``) from NULL."""
    out: list[tuple[int, list]] = []
    pos, line, n = 0, 1, len(text)
    while pos < n:
        if text[pos] in "\r\n":  # a blank line
            pos += 2 if text.startswith("\r\n", pos) else 1
            out.append((line, []))
            line += 1
            continue
        start_line, fields = line, []
        while True:
            m = _FIELD.match(text, pos)
            quoted, plain = m.group(1), m.group(2)
            if quoted is not None:
                fields.append(quoted.replace('""', '"'))
                line += quoted.count("\n") + quoted.count("\r") - quoted.count("\r\n")
            else:
                fields.append(plain if plain else None)
            pos = m.end()
            s = _SEP.match(text, pos)
            if s is None:
                raise IngestError(line, len(fields), "a quote inside an unquoted field, or text after a closing "
                                                     "quote")
            pos = s.end()
            if s.group() != ",":
                break
        out.append((start_line, fields))
        line += 1
    return out


def parse_csv(schema: Schema, data: bytes) -> list[list]:
    """The columns (one list of values per schema column) of a CSV file's rows."""
    text = _decode(data)
    if not text.strip():
        return [[] for _ in schema.columns]
    if '""' in text:
        records = _records_quoted(text)
    else:
        records = _records_plain(text)
    records = _blank_lines(records)
    if not records:
        return [[] for _ in schema.columns]
    hline, head = records[0]
    order = _header(schema, hline, head)
    rows = records[1:]
    width = len(head)
    if width == 1:  # a blank line of a one-column file is a NULL (as the one-column views print it)
        rows = [(line, fields or [None]) for line, fields in rows]
    for line, fields in rows:
        if len(fields) != width:
            raise IngestError(line, min(len(fields), width) + 1,
                              f"{len(fields)} fields where the header has {width}")
    lines = [line for line, _ in rows]
    columns: list[list] = [[] for _ in schema.columns]
    for field, col in enumerate(order):
        c = schema.columns[col]
        raw = [fields[field] for _, fields in rows]
        columns[col] = _convert(raw, text_parser(c.type), c.nullable, lines, f"{field + 1} ({c.name})")
    return columns


def _blank_lines(records: list[tuple[int, list]]) -> list[tuple[int, list]]:
    """Blank lines (records without fields) before the header are dropped; after it they stay
    only in a one-column file (see :func:`parse_csv`), and are dropped otherwise."""
    while records and not records[0][1]:
        records = records[1:]
    if records and len(records[0][1]) == 1:
        return records
    return [r for r in records if r[1]]


def _header(schema: Schema, line: int, head: list) -> list[int]:
    """The schema column of each header field; every column must be there once."""
    order, seen = [], set()
    for k, name in enumerate(head, 1):
        try:
            col = schema.index(name or "")
        except KeyError:
            raise IngestError(line, k, f"header names {name!r}, which is no column of the table "
                                       f"({', '.join(schema.names)})") from None
        if col in seen:
            raise IngestError(line, k, f"header names {name!r} twice")
        seen.add(col)
        order.append(col)
    missing = [c.name for i, c in enumerate(schema.columns) if i not in seen]
    if missing:
        raise IngestError(line, 0, f"the header lacks column(s) {', '.join(missing)}")
    return order


def _convert(raw: list, parse: Callable, nullable: bool, lines: list[int], where: str) -> list:
    """One column's field texts → values; the first bad one raises with its line."""
    if nullable or None not in raw:
        try:
            return [None if v is None else parse(v) for v in raw]
        except (ValueError, OverflowError):
            pass
    for k, v in enumerate(raw):
        if v is None:
            if not nullable:
                raise IngestError(lines[k], where, "NULL in a NOT NULL column")
            continue
        try:
            parse(v)
        except (ValueError, OverflowError) as ex:
            raise IngestError(lines[k], where, str(ex)) from None
    raise AssertionError("a conversion failed, then every value converted")


def parse_jsonl(schema: Schema, data: bytes) -> list[list]:
    """The columns of a JSON-lines file's rows."""
    text = _decode(data)
    parsers = [json_parser(c.type) for c in schema.columns]
    index = {c.name: i for i, c in enumerate(schema.columns)}
    columns: list[list] = [[] for _ in schema.columns]
    for n, line in enumerate(text.split("\n"), 1):  # (not splitlines: U+2028 and friends are JSON text)
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_float=decimal.Decimal)
        except (ValueError, RecursionError) as ex:
            raise IngestError(n, getattr(ex, "colno", 0), f"not JSON: {getattr(ex, 'msg', ex)}") from None
        if type(obj) is not dict:
            raise IngestError(n, 0, "not a JSON object")
        row: list = [None] * len(parsers)
        for key, v in obj.items():
            i = index.get(key)
            if i is None:
                raise IngestError(n, key, f"{key!r} is no column of the table ({', '.join(schema.names)})")
            if v is not None:
                try:
                    row[i] = parsers[i](v)
                except (ValueError, OverflowError) as ex:
                    raise IngestError(n, f"{i + 1} ({key})", str(ex)) from None
        for i, c in enumerate(schema.columns):
            if row[i] is None and not c.nullable:
                raise IngestError(n, f"{i + 1} ({c.name})", "NULL (or missing) in a NOT NULL column")
            columns[i].append(row[i])
    return columns


def parse_file(schema: Schema, name: bytes, data: bytes) -> list[list]:
    """By the name's suffix: ``.json``/``.jsonl``/``.ndjson`` are JSON lines, anything else CSV."""
    if name.lower().endswith((b".jsonl", b".json", b".ndjson")):
        return parse_jsonl(schema, data)
    return parse_csv(schema, data)
