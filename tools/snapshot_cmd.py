"""`trax snapshot create|delete|list` (man page: trax-snapshot(8)): snapshots of a mounted
traxfs, through its ``/.snapshots`` directory — the commands do what a user could do with mkdir,
rmdir and a read of each snapshot's ``trax.snapshot`` attribute, and say it for people or, with
``--json``, for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from .cli import _table
from .sizes import format_size

EXIT_OK, EXIT_FAIL = 0, 1
INFO = "trax.snapshot"


def _dir(mount: str) -> Path:
    return Path(mount) / ".snapshots"


def _fail(out, path: Path, e: OSError) -> int:
    return out.fail(f"{path}: {os.strerror(e.errno) if e.errno else e}", EXIT_FAIL, prefix="trax snapshot: ")


def _info(path: Path) -> dict:
    doc = json.loads(os.getxattr(path, INFO))
    doc["created"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["created_ns"] / 1e9))
    return doc


def cmd_create(a: argparse.Namespace, reg, out) -> int:
    path = _dir(a.mount) / a.name
    t0 = time.perf_counter()
    try:
        os.mkdir(path)
    except OSError as e:
        return _fail(out, path, e)
    took = time.perf_counter() - t0
    doc = {**_info(path), "seconds": round(took, 6)}
    out.emit(doc, lambda: f"snapshot {a.name} of {a.mount} created in {took * 1000:.1f} ms (id {doc['id']})")
    return EXIT_OK


def cmd_delete(a: argparse.Namespace, reg, out) -> int:
    path = _dir(a.mount) / a.name
    t0 = time.perf_counter()
    try:
        freed = _info(path)["unique_bytes"]
        os.rmdir(path)
    except OSError as e:
        return _fail(out, path, e)
    took = time.perf_counter() - t0
    out.message(f"snapshot {a.name} of {a.mount} deleted in {took * 1000:.1f} ms; {format_size(freed)} returned",
                name=a.name, freed_bytes=freed, seconds=round(took, 6))
    return EXIT_OK


def cmd_list(a: argparse.Namespace, reg, out) -> int:
    top = _dir(a.mount)
    docs = []
    try:
        names = os.listdir(top)
    except OSError as e:
        return _fail(out, top, e)
    for name in names:
        try:
            docs.append(_info(top / name))
        except FileNotFoundError:  # deleted meanwhile
            continue
        except OSError as e:
            return _fail(out, top / name, e)
    docs.sort(key=lambda d: d["id"])

    def text() -> str:
        rows = [[d["name"], str(d["id"]), d["created"], format_size(d["unique_bytes"])] for d in docs]
        return _table(rows, ["SNAPSHOT", "ID", "CREATED", "UNIQUE"]) if docs else f"no snapshots in {a.mount}"

    out.emit(docs, text)
    return EXIT_OK


def add_parser(top, sub) -> None:
    g = sub(top, "snapshot", None, "snapshots of a mounted traxfs: create, delete, list (trax-snapshot(8))")
    actions = g.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = sub(actions, "create", cmd_create, "take a snapshot (mkdir MOUNT/.snapshots/NAME)")
    q.add_argument("mount", metavar="MOUNT", help="the mount point")
    q.add_argument("name", metavar="NAME", help="the snapshot's name")
    q = sub(actions, "delete", cmd_delete, "delete a snapshot and return the space only it held")
    q.add_argument("mount", metavar="MOUNT", help="the mount point")
    q.add_argument("name", metavar="NAME", help="the snapshot's name")
    q = sub(actions, "list", cmd_list, "list the snapshots: name, id, time, bytes only each holds")
    q.add_argument("mount", metavar="MOUNT", help="the mount point")
