"""Timing probes: the only view of a disk that geometry extraction is allowed.

A probe reads ``count`` sectors at ``lbn``, issued ``delay_ms`` after the previous request
completed (closed loop), and reports when it was issued and when it completed, in milliseconds.
A simulated disk answers on its simulated clock; a real device is timed with ``perf_counter``
around a real read. Both plug into the same extraction (the geometry measured from timings
alone), which sees nothing but reads and completion times — no "translate address" diagnostic.

:class:`Probes` adds what every extraction step needs on top: a probe counter and, once the
revolution time is known, the angle at which a sector's read completed. On a zero-latency disk a
lone one-sector read completes exactly when that sector's slot has passed under the head, so the
completion angle names the slot's position on the platter whatever the seek before it was.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from .geometry import SECTOR

GRID_TOL = 5e-4  # sectors: how far a completion angle may sit from a sector boundary


@runtime_checkable
class Prober(Protocol):
    """Anything that can time a read: a simulated disk or a timed real device."""

    def probe(self, lbn: int, count: int, delay_ms: float = 0.0) -> tuple[float, float]: ...


class Readable(Protocol):
    """What a real device offers a prober: positional reads of bytes."""

    size: int

    def read(self, offset: int, length: int) -> bytes: ...


class TimedReads:
    """A real device's prober: wall-clock time around reads (block devices read with O_DIRECT)."""

    def __init__(self, device: Readable):
        self.device = device
        self._last: float | None = None

    def probe(self, lbn: int, count: int, delay_ms: float = 0.0) -> tuple[float, float]:
        if delay_ms > 0 and self._last is not None:
            until = self._last + delay_ms / 1000.0
            while (left := until - time.perf_counter()) > 0:
                if left > 0.002:
                    time.sleep(left - 0.001)
        start = time.perf_counter()
        self.device.read(lbn * SECTOR, count * SECTOR)
        self._last = time.perf_counter()
        return start * 1000.0, self._last * 1000.0


def prober_for(device: Readable) -> Prober:
    """The device itself when it models its own timing (a simulated disk), else timed reads."""
    return device if isinstance(device, Prober) else TimedReads(device)


class Probes:
    """A prober over ``capacity`` sectors, with a probe counter and completion angles."""

    def __init__(self, prober: Prober, capacity: int):
        self.prober = prober
        self.capacity = capacity
        self.count = 0
        self.revolution_ms = 0.0  # set once measured; angles need it
        self._angles: dict[int, float] = {}

    def read(self, lbn: int, count: int = 1, delay_ms: float = 0.0) -> tuple[float, float]:
        self.count += 1
        return self.prober.probe(lbn, count, delay_ms)

    def done(self, lbn: int, delay_ms: float = 0.0) -> float:
        """Completion time of a one-sector read of ``lbn``."""
        return self.read(lbn, 1, delay_ms)[1]

    def angle(self, lbn: int) -> float:
        """Fraction of a revolution at which the read of sector ``lbn`` completes (its slot's end).

        The answer depends only on where the sector is, so it is asked once per LBN."""
        a = self._angles.get(lbn)
        if a is None:
            rev = self.revolution_ms
            a = self._angles[lbn] = (self.done(lbn) % rev) / rev
        return a

    def seen(self, lo: int, hi: int) -> list[int]:
        """The sectors in ``[lo, hi)`` whose angle has been read, ascending."""
        return sorted(lbn for lbn in self._angles if lo <= lbn < hi)

    def slot_end(self, lbn: int, n: int) -> int | None:
        """Where ``lbn``'s slot ends, in sectors of a track of ``n`` (0..n-1), or None when the
        completion does not fall on that track's sector grid (the sector is in another zone)."""
        x = self.angle(lbn) * n
        i = round(x)
        return i % n if abs(x - i) <= GRID_TOL else None
