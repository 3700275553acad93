"""`trax table` (man page: trax-table(8)): tables of a mounted traxfs, through the mount's
``/tables`` folder — the command does what a user could do with ``mkdir``, a write of the schema
file, ``cat status.json`` and ``rmdir``, and says what went wrong in words.

A table is named by its path, ``MOUNT/tables/NAME``; ``list`` takes the mount point (or its
``tables`` folder).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from pathlib import Path

from ..volume.registry import Registry
from .cli_types import BadUsage

EXIT_FAIL = 1


def _table_path(path: str) -> Path:
    p = Path(path)
    if p.parent.name != "tables" or not p.name:
        raise BadUsage(f"{path}: a table is named by its path, MOUNT/tables/NAME")
    if not p.parent.is_dir():
        raise BadUsage(f"{p.parent}: no such folder (is a traxfs mounted at {p.parent.parent}?)")
    return p


def _status(p: Path) -> dict:
    return json.loads((p / "status.json").read_bytes())


def cmd_create(a: argparse.Namespace, reg: Registry, out) -> int:
    p = _table_path(a.table)
    try:
        p.mkdir()
    except FileExistsError:
        return out.fail(f"{p}: the table exists", EXIT_FAIL)
    try:
        with open(p / "schema", "w") as f:
            f.write(a.schema.rstrip("\n") + (f", key({a.key})" if a.key else "") + "\n")
    except OSError as e:
        why = _status(p).get("schema_error") if e.errno == errno.EINVAL else None
        os.rmdir(p)
        return out.fail(f"{p}: {why or e.strerror}", EXIT_FAIL)
    st = _status(p)
    out.message(f"table {p.name} created: {st['schema']}", table=p.name, schema=st["schema"])
    return 0


def cmd_list(a: argparse.Namespace, reg: Registry, out) -> int:
    top = Path(a.mount)
    top = top if top.name == "tables" else top / "tables"
    if not top.is_dir():
        raise BadUsage(f"{top}: no such folder (is a traxfs mounted there?)")
    docs = [_status(top / n) for n in sorted(os.listdir(top))]

    def text() -> str:
        if not docs:
            return "no tables"
        from .cli import _table
        return _table([[d["table"], str(d.get("rows", "-")), str(d.get("version", "-")), d.get("schema", d["state"])]
                       for d in docs], ["TABLE", "ROWS", "VERSION", "SCHEMA"])
    out.emit(docs, text)
    return 0


def cmd_show(a: argparse.Namespace, reg: Registry, out) -> int:
    p = _table_path(a.table)
    if not p.is_dir():
        return out.fail(f"{p}: no such table", EXIT_FAIL)
    doc = _status(p)

    def text() -> str:
        if doc["state"] != "ready":
            return f"{doc['table']}: {doc['state']}" + (f" ({doc['schema_error']})" if doc.get("schema_error") else "")
        lines = [f"table     {doc['table']}", f"schema    {doc['schema']}", f"rows      {doc['rows']}",
                 f"version   {doc['version']}", f"pages     {doc['pax_pages']} PAX pages, {doc['engine_pages']} "
                 f"engine pages", f"placement {doc['placement']}", "bytes per column (stored / CSV / JSON):"]
        lines += [f"  {c}: {b['stored']} / {b['csv']} / {b['json']}" for c, b in doc["bytes"].items()]
        lines += [f"rejected  {r['file']}: {r['error']}" for r in doc["rejected"]]
        return "\n".join(lines)
    out.emit(doc, text)
    return 0


def cmd_remove(a: argparse.Namespace, reg: Registry, out) -> int:
    p = _table_path(a.table)
    try:
        os.rmdir(p)
    except FileNotFoundError:
        return out.fail(f"{p}: no such table", EXIT_FAIL)
    except OSError as e:
        extra = " (a view of it is open)" if e.errno == errno.EBUSY else ""
        return out.fail(f"{p}: {e.strerror}{extra}", EXIT_FAIL)
    out.message(f"table {p.name} removed", table=p.name)
    return 0


def add_parsers(top: argparse._SubParsersAction, sub, common: list) -> None:
    grp = top.add_parser("table", help="tables of a mounted filesystem (trax-table(8))",
                         description="tables of a mounted filesystem (trax-table(8))", parents=common
                         ).add_subparsers(dest="action", required=True, metavar="ACTION")
    q = sub(grp, "create", cmd_create, "create a table: MOUNT/tables/NAME with a schema")
    q.add_argument("table", help="MOUNT/tables/NAME")
    q.add_argument("--schema", required=True, help="the columns: 'name type [not null], ...'; types int32, int64, "
                   "float64, decimal(p,s), date, timestamp, bool, string")
    q.add_argument("--key", metavar="C1,C2", help="the key columns (NOT NULL; unique among the rows, a row found "
                   "by MOUNT/tables/NAME/key/V1,V2); the same as a 'key(C1,C2)' item of the schema")
    q = sub(grp, "list", cmd_list, "list the tables of a mount")
    q.add_argument("mount", help="the mount point (or its tables folder)")
    q = sub(grp, "show", cmd_show, "a table's status: schema, rows, version, pages, bytes per column")
    q.add_argument("table", help="MOUNT/tables/NAME")
    q = sub(grp, "remove", cmd_remove, "remove a table and give its space back")
    q.add_argument("table", help="MOUNT/tables/NAME")
