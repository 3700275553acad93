"""A simulated disk drive: the mechanics of one disk plus its firmware's queue, in simulated time.

The firmware behaviours Atropos depends on are modelled as the paper describes them:

* requests queued at the disk are served shortest-positioning-time-first (SPTF), each choice made
  from where the head is when the previous request completes;
* an *idle* disk dispatches the first request of a batch at once, before it has seen the rest,
  even when another one would be cheaper — which is why Atropos pre-schedules batches on the host
  (:mod:`traxfs.volume.disk.scheduler`). ``wait_for_batch=True`` models a firmware that looks at
  the whole batch first;
* the command overhead runs from a request's arrival, in parallel with whatever the disk is
  doing: a request that waited in the queue at least that long pays none of it, so the blocks of
  a batch follow one another with nothing but switches and rotation between them;
* writes are timed like reads (write cache off).

The disk keeps only what a real one has: the head's track and the time it finishes its queued
work (``free_at``); the platter angle follows from the time. ``probe`` is the black-box view the
geometry extraction is allowed: issue a read a chosen delay after the previous completion and
observe when it completes.
"""

from __future__ import annotations

from collections.abc import Sequence

from .geometry import DiskSpec
from .mechanics import Breakdown, mechanics_of


class SimulatedDisk:
    """One modelled disk with an SPTF firmware queue; all times are simulated milliseconds."""

    def __init__(self, spec: DiskSpec, *, wait_for_batch: bool = False):
        self.spec = spec
        self.mechanics = mechanics_of(spec)
        self.geometry = self.mechanics.geometry
        self.wait_for_batch = wait_for_batch
        self.free_at = 0.0
        self.head_track = 0

    @property
    def capacity(self) -> int:
        """LBNs (512-byte sectors) on the disk."""
        return self.geometry.capacity

    def _overhead(self, arrival: float) -> float:
        """The part of the command overhead not hidden behind the work queued before ``arrival``."""
        return max(0.0, arrival + self.spec.overhead_ms - max(arrival, self.free_at))

    def _serve(self, lbn: int, count: int, arrival: float) -> Breakdown:
        start = max(arrival, self.free_at)
        b = self.mechanics.service(lbn, count, start, self.head_track, self._overhead(arrival))
        b.queued = start - arrival
        self.free_at, self.head_track = b.end, b.end_track
        return b

    def access(self, lbn: int, count: int, at: float) -> Breakdown:
        """One request arriving at ``at``; served as soon as the disk is free."""
        return self._serve(lbn, count, at)

    def positioning_ms(self, lbn: int, count: int, at: float) -> float:
        """Predicted seek + rotational latency of a request arriving at ``at``, served from the
        current head position once the disk is free (no state change)."""
        return self.mechanics.positioning_ms(lbn, count, max(at, self.free_at), self.head_track,
                                             self._overhead(at))

    def submit(self, requests: Sequence[tuple[int, int]], at: float) -> list[Breakdown]:
        """A batch of ``(lbn, count)`` requests arriving together at ``at``.

        Returns the breakdowns in request order. Service order: an idle disk starts
        ``requests[0]`` at once (unless ``wait_for_batch``); every later choice is SPTF from the
        head's position when the previous request completes (ties go to the earlier request).
        """
        results: list[Breakdown | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        if pending and not self.wait_for_batch and self.free_at <= at:
            i = pending.pop(0)
            results[i] = self._serve(*requests[i], at)
        while pending:
            i = min(pending, key=lambda j: self.positioning_ms(*requests[j], at))
            pending.remove(i)
            results[i] = self._serve(*requests[i], at)
        return results  # type: ignore[return-value]

    def probe(self, lbn: int, count: int, delay_ms: float = 0.0) -> tuple[float, float]:
        """Black-box timing probe: read ``count`` sectors at ``lbn``, issued ``delay_ms`` after
        the previous completion (closed loop). Returns (issue time, completion time)."""
        if delay_ms < 0:
            raise ValueError(f"probe delay must be non-negative (got {delay_ms})")
        issue = self.free_at + delay_ms
        return issue, self._serve(lbn, count, issue).end
