"""Click and order events: a seeded generator, the producer processes that append them to a
queue, and the totals any correct consumer must find.

Every event is one JSON line ``{"id", "ts", "key", "kind", "amount"}``: ``ts`` is an event time
in milliseconds (producer ``p``'s ``i``-th event happens at ``START_MS + (i * producers + p) *
step_ms``, so the run covers a few minutes of event time however fast it is replayed), ``key``
one of :data:`KEYS` customers, ``amount`` in cents (orders only). A (seed, producers, events per
producer) triple always gives the same events, so :func:`expected_counts` is the answer key.

Producers are separate processes (``multiprocessing``, the ``spawn`` method: no state shared
with the Spark driver's JVM threads) that each open ``/queues/NAME/append`` once and write
batches of whole lines — each ``write`` one atomic append — pausing between batches so the run
lasts :attr:`EventPlan.seconds` and has a shape a stream can follow. Each returns when it wrote everything, with a log of
``(seconds since its start, records appended)`` for the throughput plot. Halfway, each waits until
:meth:`Producers.release` (the run takes its snapshot under them then): however late a loaded
machine runs the driver, the snapshot comes while records are still to be appended.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KEYS = 12
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SCHEMA_DDL = "id STRING, ts LONG, key STRING, kind STRING, amount LONG"  # for Spark's JSON reader


@dataclass(frozen=True)
class EventPlan:
    seed: int
    producers: int
    per_producer: int
    batch: int = 500  # records per write
    step_ms: int = 7  # event-time spacing between consecutive events of the run
    seconds: float = 30.0  # how long the producers take (they pause between batches)

    @property
    def total(self) -> int:
        return self.producers * self.per_producer

    @property
    def pause_s(self) -> float:
        """Between two batches of one producer, so that all of them take about :attr:`seconds`."""
        return self.seconds / max(1, -(-self.per_producer // self.batch))


def events(plan: EventPlan, producer: int) -> Iterator[dict]:
    rng = random.Random(plan.seed * 7919 + producer)
    for i in range(plan.per_producer):
        kind = "order" if rng.random() < 0.2 else "click"
        yield {"id": f"p{producer}-{i}", "ts": START_MS + (i * plan.producers + producer) * plan.step_ms,
               "key": f"k{rng.randrange(KEYS):02d}", "kind": kind,
               "amount": rng.randrange(100, 50_000) if kind == "order" else 0}


def minute(ts_ms: int) -> int:
    """The aggregation bucket of an event time: whole minutes since the Unix epoch."""
    return ts_ms // 60_000


def expected_counts(plan: EventPlan) -> dict[tuple[int, str], tuple[int, int]]:
    """(minute, key) → (events, amount in cents) over every event of the plan."""
    counts: Counter = Counter()
    amounts: Counter = Counter()
    for p in range(plan.producers):
        for e in events(plan, p):
            k = (minute(e["ts"]), e["key"])
            counts[k] += 1
            amounts[k] += e["amount"]
    return {k: (counts[k], amounts[k]) for k in sorted(counts)}


HOLD_S = 600.0  # the longest a producer waits halfway (the run fails by its own timeout before)


def _produce(append: str, plan: EventPlan, producer: int, out: multiprocessing.Queue,
             halfway: multiprocessing.synchronize.Event) -> None:
    log = []
    t0 = time.monotonic()
    done = 0
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    try:
        batch: list[bytes] = []
        for e in events(plan, producer):
            batch.append(json.dumps(e, separators=(",", ":")).encode() + b"\n")
            if len(batch) == plan.batch:
                os.write(fd, b"".join(batch))
                done += len(batch)
                batch = []
                log.append((time.monotonic() - t0, done))
                if done * 2 >= plan.per_producer > done:  # halfway: wait for the snapshot (at once if taken)
                    halfway.wait(HOLD_S)
                time.sleep(plan.pause_s)
        if batch:
            os.write(fd, b"".join(batch))
            done += len(batch)
            log.append((time.monotonic() - t0, done))
        os.fsync(fd)
    finally:
        os.close(fd)
    out.put((producer, t0, log))


class Producers:
    """The producer processes of one plan, started together; :meth:`join` waits for them and
    gives each one's log as ``(start, [(t, appended)])`` on the monotonic clock."""

    def __init__(self, queue_dir: Path, plan: EventPlan):
        ctx = multiprocessing.get_context("spawn")
        self._out = ctx.Queue()
        self._halfway = ctx.Event()
        self.plan = plan
        self._procs = [ctx.Process(target=_produce, args=(str(queue_dir / "append"), plan, p, self._out, self._halfway),
                                   name=f"producer-{p}") for p in range(plan.producers)]

    def start(self) -> Producers:
        for p in self._procs:
            p.start()
        return self

    def release(self) -> None:
        """Let the producers go on past half their events."""
        self._halfway.set()

    def alive(self) -> bool:
        return any(p.is_alive() for p in self._procs)

    def join(self, timeout: float = 600) -> dict[int, tuple[float, list]]:
        logs = {}
        deadline = time.monotonic() + timeout
        for _ in self._procs:
            producer, t0, log = self._out.get(timeout=max(1.0, deadline - time.monotonic()))
            logs[producer] = (t0, log)
        for p in self._procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            if p.exitcode != 0:
                raise RuntimeError(f"{p.name} exited with {p.exitcode}")
        return logs

    def kill(self) -> None:
        """Stop every producer still running (an error elsewhere ended the run)."""
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(5)
