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

CSV is parsed in C (``ext/csvcolumns``: records, fields and the values of their plain spellings)
when :data:`FAST` is set; :func:`parse_csv_reference` is the same in Python, the reference the
tests hold the C path to (the same columns, or the same error, line and column). JSON lines are
decoded by the standard library and checked a column at a time (:func:`parse_jsonl`), with
:func:`parse_jsonl_reference`, line by line, as the reference and the reader that names errors.
"""

from __future__ import annotations

import codecs
import csv
import decimal
import io
import json
import re
from collections.abc import Callable, Sequence
from functools import partial

from ...ext.csvcolumns import CsvError, first_record, parse_rows
from .schema import ColType, Schema
from .values import INT_RANGES, json_parser, text_parser

FAST = True  # CSV through ext/csvcolumns, JSON lines by column; False: the references (bench_table)
QUOTE_ERROR = "a quote inside an unquoted field, text after a closing quote, or a quote never closed"


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


def _records_plain(text: str) -> list[list[str]] | None:
    """Every record's fields, for text without ``"`` (then an empty field can only be unquoted:
    NULL, kept here as ``""``): the C reader of the standard library, which splits such text as
    :func:`_records_quoted` does; None if it refuses (a field past its size limit)."""
    try:
        return list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error:
        return None


def _plain_lines(text: str) -> list[int]:
    """The line each record of :func:`_records_plain` starts on."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    out, line = [], 1
    for _ in reader:
        out.append(line)
        line = reader.line_num + 1
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
                raise IngestError(line, len(fields), QUOTE_ERROR)
            pos = s.end()
            if s.group() != ",":
                break
        out.append((start_line, fields))
        line += 1
    return out


def parse_csv(schema: Schema, data: bytes) -> list[list]:
    """The columns (one list of values per schema column) of a CSV file's rows."""
    if not FAST:
        return parse_csv_reference(schema, data)
    text = _decode(data)
    if not text or text.isspace():
        return [[] for _ in schema.columns]
    view = memoryview(data)[3 if data.startswith(codecs.BOM_UTF8) else 0 :]
    order: list[int] = []
    try:
        first = first_record(view, 0, 1)
        if first is None:
            return [[] for _ in schema.columns]
        head, head_line, pos, line = first
        try:
            order = _header(schema, head)
        except IngestError as ex:
            parse_rows(view, pos, line, None)  # a malformed record after the header comes first
            raise IngestError(head_line, ex.column, ex.reason) from None
        specs = []
        for col in order:
            c = schema.columns[col]
            specs.append((c.type.kind, c.type.scale, c.type.precision, c.nullable, text_parser(c.type)))
        fields = parse_rows(view, pos, line, specs)
    except CsvError as ex:
        if getattr(ex, "field_error", False):
            raise IngestError(ex.line, f"{ex.column} ({schema.columns[order[ex.column - 1]].name})",
                              ex.reason) from None
        raise IngestError(ex.line, ex.column, ex.reason) from None
    columns: list[list] = [[] for _ in schema.columns]
    for field, col in enumerate(order):
        columns[col] = fields[field]
    return columns


def parse_csv_reference(schema: Schema, data: bytes) -> list[list]:
    """:func:`parse_csv` in Python: the reference the C path is tested against."""
    text = _decode(data)
    if not text or text.isspace():
        return [[] for _ in schema.columns]
    plain = _records_plain(text) if '"' not in text else None
    if plain is None:
        found = _records_quoted(text)
        records, null = [f for _, f in found], None
        all_lines: Callable[[], list[int]] = lambda: [line for line, _ in found]  # noqa: E731
    else:
        records, null = plain, ""
        all_lines = partial(_plain_lines, text)
    origin = None  # kept record -> its index among all records (None: the same)
    if [] in records:  # blank lines: see _blank_lines
        origin = _blank_lines(records)
        records = [records[i] or [null] for i in origin]
    if not records:
        return [[] for _ in schema.columns]

    def line_of(k: int) -> int:
        """The line record ``k`` (0: the header) starts on."""
        return all_lines()[k if origin is None else origin[k]]

    head = records[0]
    try:
        order = _header(schema, head)
    except IngestError as ex:
        raise IngestError(line_of(0), ex.column, ex.reason) from None
    rows = records[1:]
    width = len(head)
    if set(map(len, rows)) - {width}:
        k = next(k for k, r in enumerate(rows) if len(r) != width)
        raise IngestError(line_of(k + 1), min(len(rows[k]), width) + 1,
                          f"{len(rows[k])} fields where the header has {width}")
    raw_columns = list(zip(*rows, strict=True)) if rows else [()] * width
    columns: list[list] = [[] for _ in schema.columns]
    for field, col in enumerate(order):
        c = schema.columns[col]
        columns[col] = _convert(raw_columns[field], c.type, c.nullable, null,
                                lambda k: line_of(k + 1), f"{field + 1} ({c.name})")
    return columns


def _blank_lines(records: list[list]) -> list[int]:
    """The indices of the records to keep: blank lines (records without fields) before the
    header are dropped; after it they stay only in a one-column file, where a blank line is a
    NULL (as the one-column views print it), and are dropped otherwise."""
    first = next((i for i, r in enumerate(records) if r), None)
    if first is None:
        return []
    one = len(records[first]) == 1
    return [first] + [i for i in range(first + 1, len(records)) if one or records[i]]


def _header(schema: Schema, head: list) -> list[int]:
    """The schema column of each header field; every column must be there once."""
    order, seen = [], set()
    for k, name in enumerate(head, 1):
        name = name or ""  # (an unquoted empty name reads as NULL)
        try:
            col = schema.index(name)
        except KeyError:
            raise IngestError(0, k, f"header names {name!r}, which is no column of the table "
                                       f"({', '.join(schema.names)})") from None
        if col in seen:
            raise IngestError(0, k, f"header names {name!r} twice")
        seen.add(col)
        order.append(col)
    missing = [c.name for i, c in enumerate(schema.columns) if i not in seen]
    if missing:
        raise IngestError(0, 0, f"the header lacks column(s) {', '.join(missing)}")
    return order


def _convert(raw: Sequence, t: ColType, nullable: bool, null: str | None, line_of: Callable[[int], int],
             where: str) -> list:
    """One column's fields → values (``null``: what a NULL field is, ``""`` or None); the first
    bad one raises with its line. Strings need no conversion (the text is valid UTF-8); values
    of other types are converted once per distinct text."""
    try:
        if t.kind == "string":
            out = [v or None for v in raw] if null == "" else list(raw)
        elif t.kind in ("int32", "int64"):
            out = list(map(int, raw)) if null not in raw else [int(v) if v else None for v in raw] if null == "" \
                else [None if v is None else int(v) for v in raw]
            present = [v for v in out if v is not None] if None in out else out
            lo, hi = INT_RANGES[t.kind]
            if present and (min(present) < lo or max(present) > hi):
                raise ValueError("out of range")
        else:
            parse = text_parser(t)
            memo = {v: parse(v) for v in set(raw) if v != null}
            out = list(map(memo.get, raw))
        if nullable or None not in out:
            return out
    except (ValueError, OverflowError):
        pass
    parse = text_parser(t)
    for k, v in enumerate(raw):
        if v == null or (null == "" and v is None):
            if not nullable:
                raise IngestError(line_of(k), where, "NULL in a NOT NULL column")
            continue
        try:
            parse(v)
        except (ValueError, OverflowError) as ex:
            raise IngestError(line_of(k), where, str(ex)) from None
    raise AssertionError("a conversion failed, then every value converted")


def parse_jsonl(schema: Schema, data: bytes) -> list[list]:
    """The columns of a JSON-lines file's rows: every line decoded, the values gathered by
    column and checked a column at a time; at the first doubt (a line that is not an object of
    the table's columns, a value of the wrong kind, a NULL where none may be) the file is read
    again line by line (:func:`parse_jsonl_reference`), which names the first problem."""
    if not FAST:
        return parse_jsonl_reference(schema, data)
    text = _decode(data)
    known = set(schema.names)
    decode = _DECODER.decode
    names = schema.names
    raw: list[list] = [[] for _ in names]
    appends = [r.append for r in raw]
    for line in text.split("\n"):  # (not splitlines: U+2028 and friends are JSON text)
        if not line.strip():
            continue
        try:
            obj = decode(line) if not line.startswith("\ufeff") else None
        except (ValueError, RecursionError):
            obj = None
        if type(obj) is not dict or not known.issuperset(obj):
            return parse_jsonl_reference(schema, data)
        get = obj.get  # (each object is dropped at once: a list of them keeps the collector busy)
        for add, name in zip(appends, names, strict=True):
            add(get(name))
    columns = [_json_column(c.type, c.nullable, values) for c, values in zip(schema.columns, raw, strict=True)]
    if None in columns:
        return parse_jsonl_reference(schema, data)
    return columns


_DECODER = json.JSONDecoder(parse_float=decimal.Decimal)
_NUMBER_TYPES = {"float64": (int, decimal.Decimal), "decimal": (int, decimal.Decimal, str)}


def _json_column(t: ColType, nullable: bool, values: list) -> list | None:
    """One column's JSON values (None: null or missing) → its values, as :func:`json_parser`
    gives them one by one; None if any value (or a NULL) is not accepted."""
    present = [v for v in values if v is not None] if None in values else values
    if not nullable and present is not values:
        return None
    kinds = set(map(type, present))
    kind = t.kind
    try:
        if kind in INT_RANGES:
            lo, hi = INT_RANGES[kind]
            ok = kinds <= {int} and (not present or lo <= min(present) and max(present) <= hi)
            return values if ok else None
        if kind == "bool":
            return values if kinds <= {bool} else None
        if kind == "string":
            if not kinds <= {str}:
                return None
            "".join(present).encode()  # (a lone surrogate cannot be stored)
            return values
        if not kinds <= set(_NUMBER_TYPES.get(kind, (str,))):
            return None
        parse = json_parser(t)
        if kind == "float64":  # (one by one: -0 and 0 are equal keys, and different floats)
            return [None if v is None else parse(v) for v in values]
        memo = {v: parse(v) for v in set(present)}  # (equal numbers of other types: the same value)
    except (ValueError, OverflowError):
        return None
    return [None if v is None else memo[v] for v in values]


def parse_jsonl_reference(schema: Schema, data: bytes) -> list[list]:
    """:func:`parse_jsonl` line by line: the reference, and the reader that names an error."""
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
