"""``status.json`` of a queue (``traxfs.fs.queues.status``): counts, sequence numbers, views'
heads, lag and window, refusals and the last error, and what a crash's skipped numbers do."""

from __future__ import annotations

import json

import pytest
from queue_model import close_store, new_image, open_store

from traxfs.fs.queues.config import QueueConfig
from traxfs.fs.queues.records import BadRecord
from traxfs.fs.queues.status import queue_status, status_json

pytestmark = pytest.mark.timeout(60)


def lines(first: int, n: int) -> bytes:
    return b"".join(f"{i}".ljust(49, "-").encode() + b"\n" for i in range(first, first + n))


def test_status_of_a_queue_with_views_refusals_and_a_crash(tmp_path):
    path = str(tmp_path / "q.img")
    new_image(path)
    eng, store = open_store(path)
    q = store.create(b"s", QueueConfig(block_size=16384, retain_age_seconds=None))
    assert queue_status(q)["last_seq"] is None and queue_status(q)["records"] == 0
    q.create_view(b"a")
    q.append(lines(0, 1000))
    q.create_view(b"b")
    q.commit(b"a", 400)
    with pytest.raises(BadRecord):
        q.append(b"ok\n\xff\xfe\n")
    s = json.loads(status_json(q))
    assert (s["records"], s["bytes"], s["first_seq"], s["last_seq"], s["live_end"]) == (1000, 50_000, 0, 999, 1000)
    assert s["blocks"] == q.blocks >= 3 and 0 < s["resident_percent"] <= 100
    assert s["views"] == {"a": {"head": 400, "lag": 600, "window": [400, 1000], "created_ms": q.views[b"a"].created_ms},
                          "b": {"head": 1000, "lag": 0, "window": [1000, 1000],
                                "created_ms": q.views[b"b"].created_ms}}
    assert (s["refused_writes"], s["refused_records"]) == (1, 2) and "record 2 of the write is not UTF-8" in s["last_error"]
    assert s["config"]["block_size"] == 16384 and s["state"] == "ok"
    q.sync()
    close_store(eng, store, crash=True)
    eng, store = open_store(path)
    try:
        s = queue_status(store.get(b"s"))
        assert s["last_seq"] == 999 and s["live_end"] > 1000  # the reservation's rest is skipped ...
        assert s["views"]["a"]["lag"] == 600 and s["views"]["b"]["window"] == [1000, 1000]  # ... not counted as lag
    finally:
        close_store(eng, store)
