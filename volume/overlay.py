"""A device whose writes stay in memory: the device underneath is never written.

For looking before leaping: ``trax mount`` and ``trax fsck`` first open the engine (which may
run recovery, and always writes its superblock) on an overlay to see whether it holds a healthy
filesystem at all; only then on the device itself. A refused mount therefore changes nothing.
"""

from __future__ import annotations

import threading

from .contract import DeviceContract
from .device import SECTOR, Device


class OverlayDevice(Device):
    def __init__(self, inner: DeviceContract):
        self.inner = inner
        self.path = inner.path  # messages name the device itself
        self.size = inner.size
        self.block_size = inner.block_size
        self._sectors: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        return self._overlaid(offset, self.inner.read(offset, length))

    def _overlaid(self, offset: int, raw: bytes) -> bytes:
        """``raw`` (the device's bytes at ``offset``) with the sectors held here put over it."""
        data = bytearray(raw)
        length = len(data)
        with self._lock:
            if self._sectors:
                for s in range(offset // SECTOR, -(-(offset + length) // SECTOR)):
                    held = self._sectors.get(s)
                    if held is not None:
                        lo, hi = max(s * SECTOR, offset), min((s + 1) * SECTOR, offset + length)
                        data[lo - offset : hi - offset] = held[lo - s * SECTOR : hi - s * SECTOR]
        return bytes(data)

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._check(offset, len(data))
        data = bytes(data)
        first, last = offset // SECTOR, (offset + len(data) - 1) // SECTOR
        if not data:
            return
        base = bytearray(self.read(first * SECTOR, (last - first + 1) * SECTOR))
        base[offset - first * SECTOR : offset - first * SECTOR + len(data)] = data
        with self._lock:
            for i, s in enumerate(range(first, last + 1)):
                self._sectors[s] = bytes(base[i * SECTOR : (i + 1) * SECTOR])

    def read_copies(self, offset: int, length: int) -> list[tuple[int, bytes]]:
        """The device underneath's copies (a mirror's legs), each seen through the overlay."""
        self._check(offset, length)
        return [(leg, self._overlaid(offset, data)) for leg, data in self.inner.read_copies(offset, length)]

    def repair_copy(self, leg: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Held in memory like any write: every copy then reads as ``data``."""
        self.write(offset, data)

    def boundaries(self, lbn: int) -> tuple[int, int]:
        """The device underneath's geometry: what is planned here is planned as for it."""
        return self.inner.boundaries(lbn)

    def equivalent(self, lbn: int) -> tuple[int, ...]:
        """The device underneath's quadrangles."""
        return self.inner.equivalent(lbn)

    def read_batch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The device underneath's batch, each range seen through the overlay."""
        for offset, length in ranges:
            self._check(offset, length)
        return [self._overlaid(o, data) for (o, _), data in zip(ranges, self.inner.read_batch(ranges), strict=True)]

    def locate(self, offset: int, length: int) -> list[tuple[int, str, int, int, int]]:
        """Where the device underneath keeps these bytes (sectors held here go there too)."""
        return self.inner.locate(offset, length)

    def flush(self) -> None:
        """Nothing reaches the device underneath."""

    def close(self) -> None:
        self._sectors.clear()
