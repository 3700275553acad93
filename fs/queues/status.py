"""What ``/queues/NAME/status.json`` says of a queue: one JSON document, taken under the
queue's lock so its numbers agree with each other.

Sequence numbers: ``first_seq`` is the oldest retained record, ``last_seq`` the newest (null
while the queue is empty), ``live_end`` the number the next record gets (above ``last_seq + 1``
after a crash skipped numbers). A view's ``head`` is the next record it reads, its ``window``
the records from there to the newest (``[head, last_seq + 1)``) and its ``lag`` the sequence
numbers in that window. ``resident_percent``: the share of the
queue's blocks held in memory (the tail and the cache). ``append_rate``: records per second
over the last ten whole seconds.
"""

from __future__ import annotations

import json
from dataclasses import asdict

STATUS_VERSION = 1


def queue_status(q) -> dict:
    with q.lock:
        resident = q.store.cache.resident(q.qid) + (q.tail is not None)
        end = q.records_end()
        views = {name.decode(errors="replace"): {"head": v.head, "lag": max(0, end - v.head),
                                                  "window": [v.head, max(v.head, end)], "created_ms": v.created_ms}
                 for name, v in sorted(q.views.items())}
        return {
            "version": STATUS_VERSION,
            "name": q.name.decode(errors="replace"),
            "created_ms": q.created_ms,
            "records": q.records,
            "bytes": q.payload,
            "blocks": q.blocks,
            "resident_percent": round(100 * min(resident, q.blocks) / q.blocks, 1) if q.blocks else 100.0,
            "append_rate": q.append_rate(),
            "first_seq": q.first_seq,
            "last_seq": end - 1 if q.records else None,
            "live_end": q.live_end,
            "segments": len(q.segments()),
            "views": views,
            "config": asdict(q.config),
            "refused_writes": q.stats["refused_writes"],
            "refused_records": q.stats["refused_records"],
            "last_error": q.last_error,
            "state": "removed" if q.removed else "stopped: " + q.broken if q.broken else "ok",
        }


def status_json(q) -> bytes:
    """The document as ``status.json``'s bytes."""
    return (json.dumps(queue_status(q), indent=2, sort_keys=True) + "\n").encode()
