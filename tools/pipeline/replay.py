"""A consumer view that replays the last seconds of a queue from history and catches up to live.

``mkdir views/replay`` makes a view at the live end; writing ``@<unix time>`` to its ``seek``
moves its head back to the first record appended at or after that time (history the queue
retains); reading ``records`` then returns every record from there to the live end. The consumer
checks it got exactly that many, appends a few fresh records and reads them from the same open
file (caught up: live records follow history without a gap), commits its head, and the queue's
status must show the view with no lag.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _status(qdir: Path) -> dict:
    return json.loads((qdir / "status.json").read_bytes())


def _put(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read_available(fd: int) -> bytes:
    out = []
    while chunk := os.read(fd, 1 << 20):
        out.append(chunk)
    return b"".join(out)


def replay(qdir: Path, since_unix: float, fresh: int = 100) -> dict:
    view = qdir / "views" / "replay"
    view.mkdir()
    _put(view / "seek", f"@{since_unix:.3f}")
    st = _status(qdir)
    head, live_end = st["views"]["replay"]["head"], st["live_end"]
    t0 = time.monotonic()
    fd = os.open(view / "records", os.O_RDONLY)
    try:
        history = _read_available(fd).splitlines()
        replay_s = time.monotonic() - t0
        if len(history) != live_end - head:
            raise RuntimeError(f"replay read {len(history)} records; the view's window held {live_end - head}")
        marks = [json.dumps({"id": f"live-{i}", "ts": 0, "key": "live", "kind": "probe", "amount": 0}).encode()
                 for i in range(fresh)]
        afd = os.open(qdir / "append", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(afd, b"\n".join(marks) + b"\n")
        finally:
            os.close(afd)
        live = _read_available(fd).splitlines()
    finally:
        os.close(fd)
    if live != marks:
        raise RuntimeError(f"after the replay the view read {len(live)} live records; {fresh} were appended")
    _put(view / "commit", str(head + len(history) + len(live)))
    lag = _status(qdir)["views"]["replay"]["lag"]
    if lag != 0:
        raise RuntimeError(f"the replay view still lags by {lag} records after committing everything it read")
    return {"since_unix": round(since_unix, 3), "head": head, "history_records": len(history),
            "replay_s": round(replay_s, 3), "history_records_per_s": round(len(history) / max(replay_s, 1e-6)),
            "live_records": len(live), "lag_after_commit": lag}
