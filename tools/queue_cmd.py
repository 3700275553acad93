"""`trax queue create|list|show|remove` (man page: trax-queue(8)): queues of a mounted traxfs,
through their paths (``MOUNT/queues/NAME``) — the commands do what a user could do with mkdir,
a write of ``config.json``, reads of ``status.json`` and rmdir, and say it for people or, with
``--json``, for scripts.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from pathlib import Path

from ..fs.queues.config import ConfigError
from .cli import _indent, _table
from .queue_options import add_settings_options, settings_change
from .sizes import format_size

EXIT_OK, EXIT_FAIL = 0, 1


def _queue_path(text: str) -> Path:
    """A queue's path: MOUNT/queues/NAME (a directory inside a traxfs mount's /queues)."""
    p = Path(text)
    if p.parent.name != "queues" or p.name in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r} is not a queue's path: give MOUNT/queues/NAME")
    return p


def _queues_dir(text: str) -> Path:
    """MOUNT or MOUNT/queues: the folder of a mount's queues."""
    p = Path(text)
    return p if p.name == "queues" else p / "queues"


def _status(qdir: Path) -> dict:
    with open(qdir / "status.json", "rb") as f:
        return json.loads(f.read())


def _fail(out, path: Path, e: OSError) -> int:
    return out.fail(f"{path}: {os.strerror(e.errno) if e.errno else e}", EXIT_FAIL, prefix="trax queue: ")


def cmd_create(a: argparse.Namespace, reg, out) -> int:
    try:
        change = settings_change(a)
    except ConfigError as e:
        return out.fail(str(e), 2, prefix="trax queue: ")
    path: Path = a.path
    try:
        os.mkdir(path)
    except OSError as e:
        return _fail(out, path, e)
    if change:
        try:
            fd = os.open(path / "config.json", os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, json.dumps(change).encode())
            finally:
                os.close(fd)
        except OSError as e:  # checked above, so only a failing mount gets here: leave nothing half made
            try:
                os.rmdir(path)
            except OSError:
                pass
            return _fail(out, path / "config.json", e)
    st = _status(path)
    out.emit(st, lambda: f"queue {path} created; settings: " + ", ".join(
        f"{k}={v}" for k, v in sorted(st["config"].items())))
    return EXIT_OK


def cmd_list(a: argparse.Namespace, reg, out) -> int:
    top = _queues_dir(a.mount)
    try:
        names = sorted(os.listdir(top))
    except OSError as e:
        return _fail(out, top, e)
    docs = []
    for name in names:
        try:
            docs.append(_status(top / name))
        except FileNotFoundError:  # removed meanwhile
            continue
        except OSError as e:
            return _fail(out, top / name, e)

    def text() -> str:
        rows = [[d["name"], str(d["records"]), format_size(d["bytes"]), str(d["blocks"]),
                 "-" if d["last_seq"] is None else f"{d['first_seq']}..{d['last_seq']}", str(len(d["views"])),
                 str(d["segments"]), f"{d['append_rate']:.0f}/s", d["state"]] for d in docs]
        return _table(rows, ["QUEUE", "RECORDS", "BYTES", "BLOCKS", "SEQUENCE", "VIEWS", "SEGMENTS", "RATE",
                             "STATE"]) if docs else f"no queues in {top}"

    out.emit(docs, text)
    return EXIT_OK


def cmd_show(a: argparse.Namespace, reg, out) -> int:
    try:
        st = _status(a.path)
    except OSError as e:
        return _fail(out, a.path, e)

    def text() -> str:
        seq = "empty" if st["last_seq"] is None else f"{st['first_seq']}..{st['last_seq']}"
        lines = [f"queue {st['name']} ({a.path}): {st['state']}",
                 f"  records {st['records']} ({format_size(st['bytes'])}) in {st['blocks']} blocks, "
                 f"{st['resident_percent']}% resident; sequence {seq}, next {st['live_end']}",
                 f"  segments {st['segments']}; append rate {st['append_rate']:.0f} records/s; refused writes "
                 f"{st['refused_writes']} ({st['refused_records']} records)",
                 "  settings: " + ", ".join(f"{k}={v}" for k, v in sorted(st["config"].items()))]
        if st["last_error"]:
            lines.append(f"  last error: {st['last_error']}")
        if st["views"]:
            rows = [[name, str(v["head"]), str(v["lag"]), f"{v['window'][0]}..{v['window'][1]}"]
                    for name, v in sorted(st["views"].items())]
            lines.append(_indent(_table(rows, ["VIEW", "HEAD", "LAG", "WINDOW"])))
        else:
            lines.append("  no views")
        return "\n".join(lines)

    out.emit(st, text)
    return EXIT_OK


def cmd_remove(a: argparse.Namespace, reg, out) -> int:
    try:
        os.rmdir(a.path)
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            return out.fail(f"{a.path}: not a queue", EXIT_FAIL, prefix="trax queue: ")
        return _fail(out, a.path, e)
    out.message(f"queue {a.path} removed (its views with it; its space is returned)", path=str(a.path))
    return EXIT_OK


def add_parser(top, sub) -> None:
    g = sub(top, "queue", None, "queues of a mounted traxfs: create, list, show, remove (trax-queue(8))")
    actions = g.add_subparsers(dest="action", required=True, metavar="ACTION")
    q = sub(actions, "create", cmd_create, "create a queue (mkdir MOUNT/queues/NAME) with these settings")
    q.add_argument("path", type=_queue_path, metavar="MOUNT/queues/NAME", help="the new queue's path")
    add_settings_options(q)
    q = sub(actions, "list", cmd_list, "list the queues of a mount with their counts")
    q.add_argument("mount", metavar="MOUNT", help="the mount point (or its queues folder)")
    q = sub(actions, "show", cmd_show, "show a queue's status, settings and views")
    q.add_argument("path", type=_queue_path, metavar="MOUNT/queues/NAME", help="the queue")
    q = sub(actions, "remove", cmd_remove, "remove a queue with its views and return its space")
    q.add_argument("path", type=_queue_path, metavar="MOUNT/queues/NAME", help="the queue")
