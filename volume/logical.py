"""An open logical volume: the interface upper layers use (SPEC §2).

I/O is in bytes (``read(offset, length)``, ``write(offset, data)``, ``flush()``); the Atropos
calls are in LBNs of 512 bytes (``boundaries``, ``rectangle``, ``equivalent``, ``parallelism``,
``mode_sense``), as the paper's stub library has them. On flat devices these answer honestly:
``w`` is the stripe unit, ``p`` the number of stripes, and a block's semi-sequential set is
just itself — there is no track skew to exploit.

A request that touches several devices is issued to them in parallel, one vectored I/O per
contiguous run, from a small thread pool (one worker per device). A mirror writes every leg and
reads from an in-sync leg, alternating between legs so two streams use both sides.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from traxfs.volume.device import SECTOR, Device
from traxfs.volume.errors import DeviceError, UsageError
from traxfs.volume.layout.mapping import LegMap, Run
from traxfs.volume.model import LogicalVolume, VolumeGroupMeta


@dataclass(frozen=True)
class Request:
    """One request of a batch: a read of ``length`` bytes, or a write of ``data``."""

    offset: int
    length: int = 0
    data: bytes | None = None

    @property
    def is_write(self) -> bool:
        return self.data is not None


class OpenLogicalVolume:
    def __init__(self, vg: VolumeGroupMeta, lv: LogicalVolume, devices: dict[str, Device | None],
                 on_leg_failure: Callable[[int, Exception], None] | None = None):
        self.vg_name, self.name, self.meta = vg.name, lv.name, lv
        self.devices = devices
        self.remap(vg)
        self._on_leg_failure = on_leg_failure
        self._rr = itertools.count()
        self._state_lock = threading.Lock()
        n_dev = max(1, len(lv.pvs()))
        self._pool = ThreadPoolExecutor(max_workers=min(n_dev, 16), thread_name_prefix=f"lv-{lv.name}")

    def remap(self, vg: VolumeGroupMeta) -> None:
        """Rebuild the mapping from the group's document (after extend or a replaced device)."""
        pe_start = {p.uuid: p.pe_start for p in vg.pvs}
        self.legs = [LegMap(leg.segments, vg.extent_size, self.meta.stripe_unit, pe_start) for leg in self.meta.legs]
        self.size = self.meta.extents * vg.extent_size

    # ----- which legs may serve I/O -------------------------------------------------------------
    def _leg_present(self, i: int) -> bool:
        return all(self.devices.get(a.pv) is not None for s in self.meta.legs[i].segments for a in s.areas)

    def readable_legs(self) -> list[int]:
        return [i for i, leg in enumerate(self.meta.legs) if leg.state == "in_sync" and self._leg_present(i)]

    def writable_legs(self) -> list[int]:
        return [i for i in range(len(self.meta.legs)) if self._leg_present(i)]

    def _fail_leg(self, i: int, err: Exception) -> None:
        with self._state_lock:
            if self.meta.legs[i].state == "stale":
                return
            if self._on_leg_failure is None or len(self.readable_legs()) < 2:
                raise err
            self._on_leg_failure(i, err)  # marks the leg stale in the group's metadata

    # ----- plain I/O ----------------------------------------------------------------------------
    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise UsageError(
                f"{self.vg_name}/{self.name}: access [{offset}, {offset + length}) outside the volume (size {self.size})"
            )

    def _run_io(self, leg: int, run_list: list[Run], buf: memoryview, write: bool) -> None:
        def one(run: Run) -> None:
            dev = self.devices[run.pv]
            views = [buf[o : o + n] for o, n in run.parts]
            if write:
                dev.writev(run.dev_offset, views)
            else:
                dev.readinto(run.dev_offset, views)

        futures = [self._pool.submit(one, r) for r in run_list[1:]]  # the first one runs here
        try:
            if run_list:
                one(run_list[0])
        finally:
            for f in futures:
                f.result()

    def readinto(self, offset: int, buf: memoryview) -> None:
        self._check(offset, len(buf))
        legs = self.readable_legs()
        if not legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no complete, in-sync copy is available")
        start = next(self._rr) % len(legs)
        for attempt in range(len(legs)):
            i = legs[(start + attempt) % len(legs)]
            try:
                self._run_io(i, self.legs[i].runs(offset, len(buf)), buf, write=False)
                return
            except OSError as e:  # a failing device: try the other side of a mirror
                self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: read failed: {e}"))
        raise DeviceError(f"{self.vg_name}/{self.name}: every copy failed to read [{offset}, +{len(buf)})")

    def read(self, offset: int, length: int) -> bytes:
        buf = bytearray(length)
        self.readinto(offset, memoryview(buf))
        return bytes(buf)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self._check(offset, len(view))
        legs = self.writable_legs()
        if not legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no copy is writable (devices missing)")
        for i in legs:
            try:
                self._run_io(i, self.legs[i].runs(offset, len(view)), view, write=True)
            except OSError as e:
                self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: write failed: {e}"))

    def flush(self) -> None:
        for pv in sorted(self.meta.pvs()):
            dev = self.devices.get(pv)
            if dev is not None:
                dev.flush()

    # ----- the Atropos interface (LBN = 512-byte sector) ----------------------------------------
    def _lbn(self, lbn: int) -> int:
        if not 0 <= lbn < self.size // SECTOR:
            raise UsageError(f"{self.vg_name}/{self.name}: LBN {lbn} outside the volume")
        return lbn * SECTOR

    def boundaries(self, lbn: int) -> tuple[int, int]:
        """The efficient extent around ``lbn``: (first LBN, count) of its stripe unit (track)."""
        off = self._lbn(lbn)
        unit = self.meta.stripe_unit
        return off // unit * unit // SECTOR, unit // SECTOR

    def rectangle(self, lbn: int) -> tuple[int, int]:
        """The contiguous LBNs of one row across all disks: (first LBN, p·w)."""
        start, length = self.legs[0].row(self._lbn(lbn))
        return start // SECTOR, length // SECTOR

    def parallelism(self) -> int:
        """p: how many devices a row of stripe units spans."""
        return self.meta.stripes

    def equivalent(self, lbn: int) -> tuple[int, ...]:
        """The semi-sequential set of ``lbn``. Without quadrangles no other block is reachable for
        free after ``lbn`` (no skew to ride on), so the set is ``lbn`` alone."""
        self._lbn(lbn)
        return (lbn,)

    def mode_sense(self) -> tuple[int, int]:
        """(p, w): parallelism and stripe unit in LBNs, the paper's proposed mode page."""
        return self.meta.stripes, self.meta.stripe_unit // SECTOR

    def align_up(self, offset: int) -> int:
        """Allocation hint: the first stripe-unit (track) boundary at or after ``offset`` bytes."""
        unit = self.meta.stripe_unit
        return -(-offset // unit) * unit

    def batch(self, requests: Sequence[Request]) -> list[bytes | None]:
        """Issue requests together: every device gets its share at once and serves it in
        ascending device order (the elevator a flat device benefits from), devices in parallel.
        Returns read data in request order (None for writes). Requests must not overlap.
        The simulated disks of the disk-model issue replace the elevator with host-side SPTF."""
        spans = sorted((r.offset, r.offset + (len(r.data) if r.is_write else r.length)) for r in requests)
        for s, e in spans:
            self._check(s, e - s)
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            if s2 < e1:
                raise UsageError(f"{self.vg_name}/{self.name}: overlapping requests in one batch")
        read_legs, write_legs = self.readable_legs(), self.writable_legs()
        if not read_legs or not write_legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no complete copy is available")
        read_leg = read_legs[next(self._rr) % len(read_legs)]
        results: list[bytes | None] = [None] * len(requests)
        buffers: list[bytearray | None] = [None] * len(requests)
        per_device: dict[str, list[tuple[int, list[memoryview], bool]]] = {}
        for k, r in enumerate(requests):
            if r.is_write:
                buf, legs = memoryview(r.data).cast("B"), write_legs
            else:
                buffers[k] = bytearray(r.length)
                buf, legs = memoryview(buffers[k]), [read_leg]
            for i in legs:
                for run in self.legs[i].runs(r.offset, len(buf)):
                    views = [buf[o : o + n] for o, n in run.parts]
                    per_device.setdefault(run.pv, []).append((run.dev_offset, views, r.is_write))

        def serve(pv: str) -> None:
            dev = self.devices[pv]
            for off, views, is_write in sorted(per_device[pv], key=lambda t: t[0]):
                (dev.writev if is_write else dev.readinto)(off, views)

        for f in [self._pool.submit(serve, pv) for pv in per_device]:
            f.result()
        for k, b in enumerate(buffers):
            if b is not None:
                results[k] = bytes(b)
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True)
