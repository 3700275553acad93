"""SPTF outside the firmware: the host predicts where a disk's head is and orders a batch for it.

An idle disk dispatches the first request of a batch at once (simulator.py), so a semi-sequential
batch issued in an arbitrary order can start with a request that costs most of a revolution to
reach. Atropos avoids this by pre-scheduling on the host (the freeblock technique): from the
location and completion time of the last request it predicts the head's track and, since the
platter turns at a known rate, its angle at issue time; it sends first the request with the
smallest predicted positioning time and leaves the rest to the firmware's SPTF queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from .geometry import DiskSpec
from .mechanics import mechanics_of


class HeadPredictor:
    """The host's copy of one disk's model, tracking its head from observed completions."""

    def __init__(self, spec: DiskSpec):
        self.mechanics = mechanics_of(spec)  # the same model the disk has (shared, immutable)
        self.geometry = self.mechanics.geometry
        self.head_track = 0
        self.completed_at = 0.0

    def observe(self, lbn: int, count: int, completed_at: float) -> None:
        """Record the last request served: the head rests on the track of its last sector."""
        self.head_track = self.geometry.track_of(lbn + count - 1)
        self.completed_at = completed_at

    def order(self, requests: Sequence[tuple[int, int]], at: float) -> list[int]:
        """Indices into ``requests`` in issue order: the one the head reaches soonest when issued
        at ``at`` (or when the last request completed, if later), then the others as given."""
        if not requests:
            return []
        start = max(at, self.completed_at)
        overhead = max(0.0, at + self.mechanics.spec.overhead_ms - start)  # as the disk hides it
        first = min(range(len(requests)),
                    key=lambda i: self.mechanics.positioning_ms(*requests[i], start, self.head_track, overhead))
        return [first, *(i for i in range(len(requests)) if i != first)]
