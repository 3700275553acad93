"""A simulated disk as a :class:`~traxfs.volume.device.Device`: real data, modelled timing.

The bytes live in a sparse image file, so everything above the device layer (labels, metadata,
logical volumes, the filesystem) runs unchanged; every access is also timed by a
:class:`~traxfs.volume.disk.simulator.SimulatedDisk` on a simulated clock, which is where every
performance number of the Atropos reproduction comes from.

A simulated device is recognised by a sidecar file ``<image>.disk.json`` holding its
:class:`~traxfs.volume.disk.geometry.DiskSpec` document; :func:`create_simulated` writes both and
:func:`traxfs.volume.open_device.open_device` returns a :class:`SimulatedDevice` when the sidecar exists.

Time: each access is issued at ``clock.now`` (served when the disk is free) and its completion is
noted on the clock. A device starts with a private clock and then settles it after every call, so
used on its own it behaves like a synchronous disk (each call starts when the previous one
completed). A logical volume assigns one shared clock to all its devices and settles it itself
after each request or batch, so its p disks work in parallel in simulated time.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass

from .device import SECTOR, Device, ImageFileDevice
from .disk.clock import SimClock
from .disk.geometry import DiskGeometry, DiskSpec
from .disk.mechanics import Breakdown
from .disk.simulator import SimulatedDisk
from .errors import DeviceError

SIDECAR = ".disk.json"


def sidecar_path(path: str) -> str:
    """Where the disk model of the simulated device at ``path`` is stored."""
    return path + SIDECAR


@dataclass
class DiskStats:
    """Totals (ms) over every request a simulated device served, for benchmarks."""

    requests: int = 0
    read_batches: int = 0  # reads issued together count once (a lone read is a batch of one)
    read_bytes: int = 0  # bytes the host asked to read (writes not counted)
    overhead: float = 0.0
    seek: float = 0.0
    rotation: float = 0.0
    switches: float = 0.0
    transfer: float = 0.0

    def add(self, b: Breakdown) -> None:
        self.requests += 1
        self.overhead += b.overhead
        self.seek += b.seek
        self.rotation += b.rotation
        self.switches += b.switches
        self.transfer += b.transfer

    @property
    def busy(self) -> float:
        return self.overhead + self.seek + self.rotation + self.switches + self.transfer

    @property
    def efficiency(self) -> float:
        """Access efficiency over everything served: transfer time / busy time."""
        return self.transfer / self.busy if self.busy > 0 else 0.0


class SimulatedDevice(Device):
    """An image file whose accesses are timed by a disk model (see the module docstring)."""

    def __init__(self, path: str, spec: DiskSpec | None = None, *, wait_for_batch: bool = False):
        if spec is None:
            spec = _load_spec(path)
        self.path = path
        self.disk = SimulatedDisk(spec, wait_for_batch=wait_for_batch)
        self.size = self.disk.capacity * SECTOR
        self._image = ImageFileDevice(path)
        if self._image.size < self.size:
            self._image.close()
            raise DeviceError(f"{path}: image is {self._image.size} bytes, smaller than its disk model "
                              f"{spec.name} ({self.size} bytes)")
        self._image.size = self.size
        self._private = SimClock()
        self.clock = self._private
        self.last: list[Breakdown] = []
        self.stats = DiskStats()
        self._lock = threading.Lock()

    @property
    def spec(self) -> DiskSpec:
        return self.disk.spec

    # ----- timing -------------------------------------------------------------------------------
    def _extent(self, offset: int, length: int) -> tuple[int, int]:
        lbn = offset // SECTOR
        return lbn, -(-(offset + length) // SECTOR) - lbn

    def _time(self, requests: list[tuple[int, int]]) -> None:
        """Serve ``requests`` as one batch at the clock's ``now`` and note their completion."""
        requests = [r for r in requests if r[1] > 0]
        if not requests:
            return
        with self._lock:
            done = self.disk.submit(requests, self.clock.now)
            for b in done:
                self.stats.add(b)
            self.last = done
        self.clock.note(max(b.end for b in done))
        if self.clock is self._private:
            self.clock.settle()

    # ----- Device -------------------------------------------------------------------------------
    def read(self, offset: int, length: int) -> bytes:
        data = self._image.read(offset, length)
        self.stats.read_bytes += length
        self.stats.read_batches += 1
        self._time([self._extent(offset, length)])
        return data

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._image.write(offset, data)
        self._time([self._extent(offset, len(data))])

    def readinto(self, offset: int, views: list[memoryview]) -> None:
        self._image.readinto(offset, views)
        self.stats.read_bytes += sum(len(v) for v in views)
        self.stats.read_batches += 1
        self._time([self._extent(offset, sum(len(v) for v in views))])

    def writev(self, offset: int, views: list[memoryview]) -> None:
        self._image.writev(offset, views)
        self._time([self._extent(offset, sum(len(v) for v in views))])

    def batch(self, items: list[tuple[int, list[memoryview], bool]]) -> None:
        """Do the I/O of ``(offset, buffers, is_write)`` items and time them as one batch issued
        together in the given order (the disk's firmware then picks its own service order)."""
        requests = []
        self.stats.read_batches += any(not is_write for _, _, is_write in items)
        for offset, views, is_write in items:
            (self._image.writev if is_write else self._image.readinto)(offset, views)
            self.stats.read_bytes += 0 if is_write else sum(len(v) for v in views)
            requests.append(self._extent(offset, sum(len(v) for v in views)))
        self._time(requests)

    def flush(self) -> None:
        """Make the image durable; free in simulated time (the write cache is off)."""
        self._image.flush()

    def probe(self, lbn: int, count: int, delay_ms: float = 0.0) -> tuple[float, float]:
        """Black-box timing probe on the disk (:meth:`SimulatedDisk.probe`); no data moves."""
        with self._lock:
            return self.disk.probe(lbn, count, delay_ms)

    def close(self) -> None:
        self._image.close()


def _load_spec(path: str) -> DiskSpec:
    side = sidecar_path(path)
    try:
        with open(side) as f:
            return DiskSpec.from_doc(json.load(f))
    except OSError as e:
        raise DeviceError(f"{side}: cannot read the disk model: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise DeviceError(f"{side}: not a disk model document ({e})") from None


def create_simulated(path: str, spec: DiskSpec) -> SimulatedDevice:
    """Create a sparse image of the disk's capacity and its model sidecar, and open it."""
    ImageFileDevice(path, size=DiskGeometry(spec).capacity * SECTOR, create=True).close()
    side = sidecar_path(path)
    tmp = side + ".tmp"
    with open(tmp, "w") as f:
        json.dump(spec.to_doc(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, side)
    return SimulatedDevice(path, spec)
